//! `slipway completions` and `slipway man`: shell completions and manual pages written from the
//! command line's own definition, so they cannot fall behind it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap_complete::Shell;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway completions bash > /etc/bash_completion.d/slipway\n  \
    slipway completions zsh > \"${fpath[1]}/_slipway\"\n  \
    slipway completions fish > ~/.config/fish/completions/slipway.fish")]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway man | man -l -\n  \
    slipway man validate | man -l -\n  \
    slipway man --dir /usr/local/share/man/man1")]
pub struct ManArgs {
    /// The command whose page to print (`validate`, `render`, ...); default: slipway's own.
    pub command: Option<String>,
    /// Write every page (slipway.1, slipway-validate.1, ...) into this directory instead, and
    /// print their paths.
    #[arg(long, conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// The completion script of `cmd` for `args.shell`, for the binary named `bin`.
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command, bin: &str) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, bin, &mut out);
    out
}

/// Prints one page, or writes them all.
pub fn man(args: &ManArgs, cmd: clap::Command) -> anyhow::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for path in write_pages(&cmd, dir)? {
            println!("{}", path.display());
        }
        return Ok(());
    }
    let page = match &args.command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => sub.clone(),
            None => bail!(
                "no command {name:?}; the commands are {}",
                cmd.get_subcommands()
                    .map(|s| s.get_name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .context("cannot write the page")?;
    use std::io::Write;
    std::io::stdout()
        .write_all(&out)
        .context("cannot write to stdout")
}

/// The pages of `cmd` and of each of its commands, as `<name>.1` files in `dir`.
fn write_pages(cmd: &clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page).context("cannot write the page")?;
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    let mut paths = vec![path];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        paths.extend(write_pages(sub, dir)?);
    }
    Ok(paths)
}
