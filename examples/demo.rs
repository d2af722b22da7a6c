//! The main demo: the calendar example connector on the embedded SQLite store, end to end.
//!
//! ```text
//! cargo run -p aip-connector-examples --example demo               # state in target/aip-demo/demo.db
//! cargo run -p aip-connector-examples --example demo -- my.db      # or another file
//! AIP_DEMO_DB=my.db cargo run -p aip-connector-examples --example demo
//! ```
//!
//! It prints the admitted manifest, plans and commits a booking, replays the same key, shows an
//! uncertain outcome refused for blind retry and then reconciled, and prints where the state
//! lives. Run it twice: the second run finds the first run's booking in the file. The steps are
//! `aip_connector_examples::demo::run`, which `examples/tests/demo.rs` runs twice too.

use std::process::ExitCode;

use aip_connector_examples::demo::{DemoConfig, run};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let config = DemoConfig::from_args(std::env::args().skip(1));
    let mut stdout = std::io::stdout().lock();
    match run(&config, &mut stdout).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}
