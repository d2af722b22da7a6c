//! Stable issue codes of the manifest-level and schema checks (`aip-model.md` §7.4).
//!
//! The spellings are upstream's: a report produced here and one produced by `aip-discovery`
//! carry the same codes for the same problems. Contract codes (`contract.*`) and implementation
//! codes (`implementation.*`) live in [`crate::rules::codes`], next to the rules that emit them.

/// Check 1: `manifest_version` is empty after trimming.
pub const MANIFEST_VERSION_EMPTY: &str = "manifest.version.empty";
/// Check 2: the manifest declares no profile.
pub const MANIFEST_PROFILES_EMPTY: &str = "manifest.profiles.empty";
/// Check 3: a profile is listed more than once (one issue per repeat).
pub const MANIFEST_PROFILE_DUPLICATE: &str = "manifest.profile.duplicate";
/// Check 4: a capability id was already declared earlier in the manifest.
pub const MANIFEST_CAPABILITY_DUPLICATE: &str = "manifest.capability.duplicate";
/// Check 5: a capability name is empty after trimming.
pub const MANIFEST_CAPABILITY_NAME_EMPTY: &str = "manifest.capability.name_empty";
/// Check 6: a resource id is empty after trimming.
pub const MANIFEST_RESOURCE_ID_EMPTY: &str = "manifest.resource.id_empty";
/// Check 7: a resource id was already declared earlier in the manifest.
pub const MANIFEST_RESOURCE_DUPLICATE: &str = "manifest.resource.duplicate";
/// Check 8: a resource names a capability the manifest does not declare.
pub const MANIFEST_RESOURCE_CAPABILITY_MISSING: &str = "manifest.resource.capability_missing";
// Checks 9 and 10 live with the channel checks in `discovery`, which the macros (built without
// the schema compiler, so without this module) also run.
pub use crate::discovery::{MANIFEST_CHANNEL_DUPLICATE, MANIFEST_CHANNEL_IDENTIFIER_MISSING};
/// Check 11: a schema root is neither an object nor a boolean.
pub const SCHEMA_INVALID_ROOT: &str = "schema.invalid_root";
/// Check 12: a `$ref` does not start with `#` and the policy forbids remote references.
pub const SCHEMA_REMOTE_REFERENCE_FORBIDDEN: &str = "schema.remote_reference_forbidden";
/// Check 13: a schema exceeds a complexity limit or does not compile as Draft 2020-12.
pub const SCHEMA_COMPILE_FAILED: &str = "schema.compile_failed";
/// Check 14: upstream's code for a compiler that is not running.
///
/// Never emitted here: schemas compile in the calling thread, so there is no compiler to lose.
/// Upstream cannot reach it either; the constant exists so that report consumers can name every
/// upstream code.
pub const SCHEMA_COMPILER_UNAVAILABLE: &str = "schema.compiler_unavailable";
/// Check 15: one capability binds the same profile twice.
pub const MANIFEST_BINDING_DUPLICATE: &str = "manifest.binding.duplicate";
/// Check 16: a binding names a profile the manifest does not declare.
pub const MANIFEST_BINDING_PROFILE_UNDECLARED: &str = "manifest.binding.profile_undeclared";
/// Check 17: a binding names a profile outside the policy's allowed binding profiles.
pub const MANIFEST_BINDING_PROFILE_UNSUPPORTED: &str = "manifest.binding.profile_unsupported";
/// Check 28: two capabilities project to the same name under one profile.
pub const MANIFEST_PROFILE_NAME_COLLISION: &str = "manifest.profile_name.collision";
