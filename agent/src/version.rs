//! What this binary is: its version (Cargo.toml), the git commit it was
//! built from and its build date (both set by `agent/build.rs`), for
//! `slowpath --version` and `slowpath_build_info`.

/// The package version, `0.2.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit, 7 hex digits; `unknown` for a build from a tree without
/// `.git` (a source archive, an image's build context).
pub const REVISION: &str = env!("SLOWPATH_REVISION");
/// `YYYY-MM-DD` (UTC): `SOURCE_DATE_EPOCH`'s when the build had it, else
/// the commit's, else the day of the build.
pub const BUILD_DATE: &str = env!("SLOWPATH_BUILD_DATE");
/// What `--version` prints after the name: `0.2.0 (abc1234 2026-11-30)`,
/// or `0.2.0 (built outside git, 2026-11-30)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SLOWPATH_VERSION_DETAIL"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_the_commit_and_the_date() {
        assert!(LONG.starts_with(&format!("{VERSION} (")), "{LONG}");
        assert!(LONG.ends_with(&format!("{BUILD_DATE})")), "{LONG}");
        assert_eq!(BUILD_DATE.len(), 10, "{BUILD_DATE}");
        assert!(
            REVISION == "unknown"
                || (REVISION.len() == 7 && REVISION.chars().all(|c| c.is_ascii_hexdigit())),
            "{REVISION}"
        );
        if REVISION != "unknown" {
            assert!(LONG.contains(REVISION), "{LONG}");
        }
    }
}
