"""Writes the fuzzers' seed corpus: every graph document of the lit suite (lit-tests/**/*.json,
split at `// -----`, comment lines dropped) into fuzz/corpus/graph/."""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for source in sorted((ROOT / "lit-tests").rglob("*.json")):
        if "Output" in source.parts:
            continue
        for k, chunk in enumerate(source.read_text().split("// -----")):
            text = "\n".join(line for line in chunk.splitlines() if not line.startswith("//"))
            try:
                json.loads(text)
            except ValueError:
                continue
            name = f"{source.parent.name}-{source.stem}-{k}.json"
            (out / name).write_text(text)
            count += 1
    print(f"{count} seeds in {out}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus" / "graph")
