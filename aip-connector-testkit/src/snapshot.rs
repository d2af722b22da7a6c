//! Manifest snapshots with a drift check.
//!
//! A connector crate commits the JSON of its manifest (by default
//! `tests/snapshots/<connector id>.manifest.json`) and checks it in a test:
//!
//! ```text
//! #[test]
//! fn manifest_has_not_drifted() {
//!     aip_connector_testkit::assert_manifest_snapshot!(Calendar);
//! }
//! ```
//!
//! When the manifest no longer matches the file, the test fails and lists every difference,
//! classified as [`ChangeClass::Breaking`] or [`ChangeClass::Compatible`] (the rules are on
//! [`ChangeKind`] and in the README). Running the tests with `AIP_UPDATE_SNAPSHOTS=1` writes
//! the current manifest instead — the first time, or after a reviewed change — and prints the
//! classified changes it accepted.
//!
//! The file is the manifest rendered canonically ([`render_manifest`]): object keys sorted at
//! every level, two-space indentation, a trailing newline. The same manifest always renders to
//! the same bytes, so the file diffs cleanly in review.
//!
//! The functions take the [`SnapshotMode`] as a parameter; only the macro reads the
//! environment, so tests of this module never race on a process-wide variable.

mod diff;
mod schema;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use aip_connector::model::Manifest;
use aip_connector::{Connector, ConnectorDefinition};
use serde_json::{Map, Value};

pub use diff::{ChangeClass, ChangeKind, ManifestChange, SnapshotDiff, diff_manifests};

/// The environment variable that makes [`assert_manifest_snapshot!`](crate::assert_manifest_snapshot)
/// rewrite snapshots instead of failing: any value but empty, `0`, `false`, `no` or `off`.
pub const UPDATE_SNAPSHOTS_ENV: &str = "AIP_UPDATE_SNAPSHOTS";

/// The folder, relative to the connector crate's root, that holds snapshots by default.
pub const DEFAULT_SNAPSHOT_DIR: &str = "tests/snapshots";

/// What to do when the snapshot is missing or differs from the manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotMode {
    /// Fail: report a missing snapshot, or the classified drift.
    Check,
    /// Write the current manifest to the snapshot file and succeed.
    Update,
}

impl SnapshotMode {
    /// [`Update`](Self::Update) when [`UPDATE_SNAPSHOTS_ENV`] is set to a value other than
    /// empty, `0`, `false`, `no` or `off` (any case); [`Check`](Self::Check) otherwise.
    pub fn from_env() -> Self {
        Self::from_env_value(
            std::env::var_os(UPDATE_SNAPSHOTS_ENV)
                .as_deref()
                .and_then(|v| v.to_str()),
        )
    }

    /// The mode a value of [`UPDATE_SNAPSHOTS_ENV`] selects (`None`: the variable is unset).
    pub fn from_env_value(value: Option<&str>) -> Self {
        match value.map(|value| value.trim().to_ascii_lowercase()) {
            None => SnapshotMode::Check,
            Some(value) if matches!(value.as_str(), "" | "0" | "false" | "no" | "off") => {
                SnapshotMode::Check
            }
            Some(_) => SnapshotMode::Update,
        }
    }
}

/// What a successful snapshot check did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SnapshotOutcome {
    /// The snapshot matches the manifest byte for byte (line endings aside).
    Unchanged,
    /// There was no snapshot; it was written ([`SnapshotMode::Update`] only).
    Created,
    /// The snapshot differed and was rewritten ([`SnapshotMode::Update`] only); the diff is
    /// what was accepted.
    Updated(SnapshotDiff),
    /// The old file could not be read as a manifest and was overwritten
    /// ([`SnapshotMode::Update`] only).
    Replaced {
        /// Why the old file could not be read.
        reason: String,
    },
}

/// Why a snapshot check failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// There is no snapshot file yet ([`SnapshotMode::Check`]).
    Missing {
        /// Where it was expected.
        path: PathBuf,
    },
    /// The manifest differs from the snapshot ([`SnapshotMode::Check`]).
    Drift {
        /// The snapshot file.
        path: PathBuf,
        /// Every difference, classified.
        diff: SnapshotDiff,
    },
    /// The snapshot file is not JSON of a manifest ([`SnapshotMode::Check`]).
    Unreadable {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading or writing the file failed.
    Io {
        /// The snapshot file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl SnapshotError {
    /// The snapshot file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            SnapshotError::Missing { path }
            | SnapshotError::Drift { path, .. }
            | SnapshotError::Unreadable { path, .. }
            | SnapshotError::Io { path, .. } => path,
        }
    }

    /// The classified drift, when the error is [`SnapshotError::Drift`].
    pub fn diff(&self) -> Option<&SnapshotDiff> {
        match self {
            SnapshotError::Drift { diff, .. } => Some(diff),
            _ => None,
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Missing { path } => write!(
                f,
                "no manifest snapshot yet at {}\n\
                 create it by running the tests with {UPDATE_SNAPSHOTS_ENV}=1 \
                 (e.g. `{UPDATE_SNAPSHOTS_ENV}=1 cargo test`), then review and commit the file",
                path.display()
            ),
            SnapshotError::Drift { path, diff } => {
                let verdict = if diff.is_breaking() {
                    "BREAKING: callers, clients or governance that relied on the published \
                     manifest are affected; publish as a new major version"
                } else {
                    "compatible: the changes can ship in a minor release"
                };
                write!(
                    f,
                    "manifest drifted from the snapshot at {}: {diff}\n{verdict}\n\
                     if the changes are intended, rewrite the snapshot with \
                     `{UPDATE_SNAPSHOTS_ENV}=1 cargo test` and commit it",
                    path.display()
                )
            }
            SnapshotError::Unreadable { path, reason } => write!(
                f,
                "the manifest snapshot at {} cannot be read as a manifest: {reason}\n\
                 fix the file, or rewrite it with `{UPDATE_SNAPSHOTS_ENV}=1 cargo test`",
                path.display()
            ),
            SnapshotError::Io { path, source } => {
                write!(f, "manifest snapshot {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The manifest as the snapshot stores it: JSON with object keys sorted at every level,
/// pretty-printed with two-space indentation, ending in a newline. Array order is kept.
pub fn render_manifest(manifest: &Manifest) -> String {
    // `Manifest` serialises infallibly: every map in it has string keys.
    let value = serde_json::to_value(manifest).unwrap_or(Value::Null);
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap_or_default();
    text.push('\n');
    text
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.cmp(b));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The default snapshot file of connector `connector_id` in the crate rooted at `crate_dir`:
/// `<crate_dir>/tests/snapshots/<connector id>.manifest.json`. Characters other than ASCII
/// letters, digits, `.`, `-` and `_` in the id become `_`, so the name is valid on every
/// platform.
pub fn default_snapshot_path(crate_dir: impl AsRef<Path>, connector_id: &str) -> PathBuf {
    let file_stem: String = connector_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    crate_dir
        .as_ref()
        .join(DEFAULT_SNAPSHOT_DIR)
        .join(format!("{file_stem}.manifest.json"))
}

/// Compares `manifest` with the snapshot at `path` and, in [`SnapshotMode::Update`], writes it
/// when it is missing or differs.
///
/// In [`SnapshotMode::Check`] a missing, unreadable or different snapshot is an error; the
/// error's `Display` is the message a failing test shows. A snapshot that differs only in
/// formatting (line endings aside) is drift too, reported as one
/// [`ChangeKind::Formatting`] change, so the committed file always stays canonical.
pub fn check_manifest_snapshot(
    manifest: &Manifest,
    path: &Path,
    mode: SnapshotMode,
) -> Result<SnapshotOutcome, SnapshotError> {
    let rendered = render_manifest(manifest);
    let existing = match fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(SnapshotError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let Some(existing) = existing else {
        return match mode {
            SnapshotMode::Check => Err(SnapshotError::Missing {
                path: path.to_owned(),
            }),
            SnapshotMode::Update => {
                write_snapshot(path, &rendered).map(|()| SnapshotOutcome::Created)
            }
        };
    };
    // A checkout with `core.autocrlf` turns the committed `\n` into `\r\n`.
    let existing = existing.replace("\r\n", "\n");
    if existing == rendered {
        return Ok(SnapshotOutcome::Unchanged);
    }
    let old = match serde_json::from_str::<Manifest>(&existing) {
        Ok(old) => old,
        Err(error) => {
            let reason = error.to_string();
            return match mode {
                SnapshotMode::Check => Err(SnapshotError::Unreadable {
                    path: path.to_owned(),
                    reason,
                }),
                SnapshotMode::Update => {
                    write_snapshot(path, &rendered).map(|()| SnapshotOutcome::Replaced { reason })
                }
            };
        }
    };
    let mut diff = diff_manifests(&old, manifest);
    if diff.is_empty() {
        diff.push(ManifestChange::formatting());
    }
    match mode {
        SnapshotMode::Check => Err(SnapshotError::Drift {
            path: path.to_owned(),
            diff,
        }),
        SnapshotMode::Update => {
            write_snapshot(path, &rendered).map(|()| SnapshotOutcome::Updated(diff))
        }
    }
}

/// [`check_manifest_snapshot`] that panics with the error's message on failure and reports
/// what it wrote on stderr. The panic points at the caller.
#[track_caller]
pub fn assert_manifest_snapshot_at(manifest: &Manifest, path: &Path, mode: SnapshotMode) {
    match check_manifest_snapshot(manifest, path, mode) {
        Ok(SnapshotOutcome::Unchanged) => {}
        Ok(SnapshotOutcome::Created) => {
            eprintln!(
                "manifest snapshot created at {}; review and commit it",
                path.display()
            );
        }
        Ok(SnapshotOutcome::Updated(diff)) => {
            eprintln!("manifest snapshot rewritten at {}: {diff}", path.display());
        }
        Ok(SnapshotOutcome::Replaced { reason }) => {
            eprintln!(
                "manifest snapshot at {} replaced (the old file was unreadable: {reason})",
                path.display()
            );
        }
        Err(error) => panic!("{error}"),
    }
}

/// [`assert_manifest_snapshot_at`] for `connector`'s manifest at its
/// [default path](default_snapshot_path) under `crate_dir`.
#[track_caller]
pub fn assert_connector_snapshot<C: Connector + ?Sized>(
    connector: &C,
    crate_dir: &Path,
    mode: SnapshotMode,
) {
    assert_definition_snapshot(connector.definition(), crate_dir, mode);
}

/// [`assert_manifest_snapshot_at`] for the manifest of `definition` at its
/// [default path](default_snapshot_path) under `crate_dir`.
#[track_caller]
pub fn assert_definition_snapshot(
    definition: &ConnectorDefinition,
    crate_dir: &Path,
    mode: SnapshotMode,
) {
    let path = default_snapshot_path(crate_dir, &definition.id);
    assert_manifest_snapshot_at(&definition.manifest(), &path, mode);
}

/// The definition of connector type `C`, for `assert_manifest_snapshot!(type = C)`. Not meant to
/// be used directly.
#[doc(hidden)]
pub fn definition_of<C: aip_connector::StaticDefinition>() -> &'static ConnectorDefinition {
    C::static_definition()
}

/// How [`assert_manifest_snapshot!`](crate::assert_manifest_snapshot) reaches a connector's
/// definition: by method call, so a connector, a reference to one, an `Arc` or a `Box` all
/// work. Not meant to be used directly.
#[doc(hidden)]
pub trait DefinitionSource {
    /// The connector's definition.
    fn aip_snapshot_definition(&self) -> &ConnectorDefinition;
}

impl<C: Connector + ?Sized> DefinitionSource for C {
    fn aip_snapshot_definition(&self) -> &ConnectorDefinition {
        self.definition()
    }
}

/// Writes through a temporary file in the same folder, so an interrupted run never leaves a
/// half-written snapshot behind.
fn write_snapshot(path: &Path, text: &str) -> Result<(), SnapshotError> {
    let io_error = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        fs::create_dir_all(parent).map_err(io_error)?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = PathBuf::from(temporary);
    fs::write(&temporary, text).map_err(io_error)?;
    fs::rename(&temporary, path).map_err(|source| {
        let _ = fs::remove_file(&temporary);
        io_error(source)
    })
}

/// Checks a connector's manifest against its committed snapshot; fails the test on drift with
/// every change classified as breaking or compatible.
///
/// - `assert_manifest_snapshot!(connector)` uses
///   `tests/snapshots/<connector id>.manifest.json` in the calling crate.
/// - `assert_manifest_snapshot!(connector, path = "tests/api/calendar.json")` uses a path
///   relative to the calling crate's root (an absolute path is used as is).
/// - `assert_manifest_snapshot!(type = Calendar)` (and `type = Calendar, path = "..."`) reads
///   the definition of a `#[connector]` type without a value of it
///   ([`StaticDefinition`](aip_connector::StaticDefinition)): no provider client, credential or
///   state to build for a test of the manifest.
/// - `assert_manifest_snapshot!(manifest = manifest_value, path = "...")` checks a
///   [`Manifest`](aip_connector::model::Manifest) built some other way.
///
/// `connector` is a value implementing [`Connector`](aip_connector::Connector) (what
/// `#[connector]` generates), or a reference, `Arc` or `Box` of one; it is only borrowed. The calling crate's root is captured with
/// `env!("CARGO_MANIFEST_DIR")` at the call site. With `AIP_UPDATE_SNAPSHOTS=1` the snapshot is
/// written instead of checked ([`SnapshotMode::from_env`]).
#[macro_export]
macro_rules! assert_manifest_snapshot {
    (manifest = $manifest:expr, path = $path:expr $(,)?) => {
        $crate::snapshot::assert_manifest_snapshot_at(
            &$manifest,
            &::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join($path),
            $crate::snapshot::SnapshotMode::from_env(),
        )
    };
    // Before the `$connector:expr` arms: `type` cannot start an expression, and an arm whose
    // fragment fails to parse would end the macro's matching with a parse error.
    (type = $connector:ty, path = $path:expr $(,)?) => {
        $crate::snapshot::assert_manifest_snapshot_at(
            &$crate::snapshot::definition_of::<$connector>().manifest(),
            &::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join($path),
            $crate::snapshot::SnapshotMode::from_env(),
        )
    };
    (type = $connector:ty $(,)?) => {
        $crate::snapshot::assert_definition_snapshot(
            $crate::snapshot::definition_of::<$connector>(),
            ::std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
            $crate::snapshot::SnapshotMode::from_env(),
        )
    };
    ($connector:expr, path = $path:expr $(,)?) => {{
        use $crate::snapshot::DefinitionSource as _;
        $crate::snapshot::assert_manifest_snapshot_at(
            &($connector).aip_snapshot_definition().manifest(),
            &::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join($path),
            $crate::snapshot::SnapshotMode::from_env(),
        )
    }};
    ($connector:expr $(,)?) => {{
        use $crate::snapshot::DefinitionSource as _;
        $crate::snapshot::assert_definition_snapshot(
            ($connector).aip_snapshot_definition(),
            ::std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
            $crate::snapshot::SnapshotMode::from_env(),
        )
    }};
}
