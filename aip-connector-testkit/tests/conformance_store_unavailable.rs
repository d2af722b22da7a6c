//! A store that does not open stops every scenario with a reason that names the scenario's own
//! store file, so no two reasons are equal: the summary still says it once, naming the checks.
//! (Review: five lines, one per check, under `TMPDIR=/nonexistent`.) The run happens in a child
//! process of this test binary whose `TMPDIR` does not exist.

use aip_connector::prelude::*;
use aip_connector_testkit::conformance::ConformanceSuite;

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    /// What to look up.
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct Found {
    /// What was found.
    name: String,
}

struct Directory;

#[connector(id = "directory")]
impl Directory {
    /// Looks a name up.
    #[capability(
        risk = low,
        side_effects = [read],
        data(sensitivity = internal),
        examples = [r#"{"name": "ada"}"#],
    )]
    async fn lookup(&self, lookup: Lookup) -> Result<Found, ConnectorFailure> {
        Ok(Found { name: lookup.name })
    }
}

#[test]
fn a_store_that_does_not_open_is_one_line_of_the_summary() {
    let missing = std::env::temp_dir().join("aip-conformance-no-such-dir/nested");
    let child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--ignored",
            "--exact",
            "run_with_a_store_that_does_not_open",
            "--nocapture",
        ])
        .env("TMPDIR", &missing)
        .output()
        .expect("the test binary runs");
    let out = String::from_utf8_lossy(&child.stdout).into_owned()
        + &String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{out}");
    assert!(out.contains("1 passed"), "the child ran the run: {out}");
}

/// Run by [`a_store_that_does_not_open_is_one_line_of_the_summary`] with a `TMPDIR` that does
/// not exist.
#[test]
#[ignore = "run by a_store_that_does_not_open_is_one_line_of_the_summary, with its TMPDIR"]
fn run_with_a_store_that_does_not_open() {
    let report = ConformanceSuite::new(|_| Directory).run();
    let summary = report.summary();
    eprintln!("{summary}");
    let lines: Vec<&str> = summary
        .lines()
        .filter(|line| line.contains("not run: "))
        .collect();
    assert_eq!(lines.len(), 1, "{summary}");
    assert!(
        lines[0].starts_with("  FAIL 5 checks not run: the scenario's store did not open: ")
            && lines[0].contains(" (and 4 more like it: each check's detail has its own)")
            && lines[0].ends_with(
                " (identity_credentials, schema_enforcement, errors_uncertain_outcomes, audit_redaction, restart_reconnect)"
            ),
        "{summary}"
    );
    assert!(!report.passed());
}
