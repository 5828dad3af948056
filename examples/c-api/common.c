#include "common.h"

#include <stdio.h>
#include <stdlib.h>

char *read_file(const char *path, size_t *length) {
  FILE *file = fopen(path, "rb");
  if (!file) {
    perror(path);
    exit(2);
  }
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *data = malloc((size_t)size + 1);
  if (!data || fread(data, 1, (size_t)size, file) != (size_t)size) {
    fprintf(stderr, "%s: cannot read\n", path);
    exit(2);
  }
  fclose(file);
  data[size] = '\0';
  *length = (size_t)size;
  return data;
}

void check(fxmlir_status status, const char *what) {
  if (status != FXMLIR_OK) {
    fprintf(stderr, "%s failed (status %d): %s\n", what, (int)status, fxmlir_last_error());
    exit(1);
  }
}

void check_abi(void) {
  if (fxmlir_abi_version() != FXMLIR_ABI_VERSION) {
    fprintf(stderr, "libfxmlir implements ABI %u, this program was built for %u\n",
            fxmlir_abi_version(), FXMLIR_ABI_VERSION);
    exit(2);
  }
}
