//! `FXMLIR_LOG` (an `EnvFilter` directive such as `debug` or `fxmlir=info`) turns on tracing
//! output on stderr, for the CLI and the Python extension alike.

use std::sync::Once;

pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(filter) = std::env::var("FXMLIR_LOG") else {
            return;
        };
        let filter = tracing_subscriber::EnvFilter::try_new(&filter)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .try_init();
    });
}
