//! The manual pages and shell completions, generated from the flags' own
//! definitions (`cli.rs`, through clap_mangen and clap_complete), so that
//! they never disagree with `--help`. `tests/deploy/build-deb.sh` puts both
//! in the package.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// `slowpath completions SHELL`: the script on standard output.
pub fn print_completions(shell: Shell) -> Result<()> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "slowpath", &mut std::io::stdout());
    Ok(())
}

/// `slowpath man DIR`: `slowpath.1` and a page per visible subcommand
/// (`slowpath-doctor.1`, ...), section 1, roff. Errors: DIR cannot be made
/// or written.
pub fn write_man_pages(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    let command = Cli::command().version(crate::version::LONG);
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_for_the_agent_and_each_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("slowpath-man-{}", std::process::id()));
        write_man_pages(&dir).unwrap();
        let mut pages: Vec<String> = (fs::read_dir(&dir).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        pages.sort();
        let agent = fs::read_to_string(dir.join("slowpath.1")).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert!(pages.contains(&"slowpath-top.1".to_string()), "{pages:?}");
        assert!(
            pages.contains(&"slowpath-doctor.1".to_string()),
            "{pages:?}"
        );
        assert!(
            !pages.iter().any(|p| p.contains("-man")),
            "the hidden one: {pages:?}"
        );
        assert!(agent.contains("web.listen\\-address"), "{}", &agent[..400]);
    }
}
