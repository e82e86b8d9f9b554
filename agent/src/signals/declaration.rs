//! How a signal's families serialize in `slowpath signals` (the export,
//! `crate::export`), which prints [`super::SIGNALS`] itself
//! ([`super::Signal`] says what each field holds; the syscalls come from the
//! embedded object's table); the tests that use it check it against the
//! kernel and a real scrape beside.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use crate::exposition::Family;

/// A family as `slowpath signals` prints it: name, Prometheus type (lower
/// case) and help.
#[derive(Serialize)]
struct FamilyView {
    name: &'static str,
    #[serde(rename = "type")]
    kind: String,
    help: &'static str,
}

/// [`super::Signal::families`] as a list of [`FamilyView`]s.
pub fn family_views<S: Serializer>(
    families: &&'static [&'static Family],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(families.len()))?;
    for f in families.iter() {
        seq.serialize_element(&FamilyView {
            name: f.name,
            kind: format!("{:?}", f.kind).to_lowercase(),
            help: f.help,
        })?;
    }
    seq.end()
}
