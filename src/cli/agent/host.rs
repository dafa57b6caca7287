//! The sentinel command in the host's namespaces (`--sentinel-in-host`), as kured runs it with
//! `nsenter -t 1 -m -u -i -n -p`: the agent starts itself again as `slipway host-exec -- COMMAND`.
//! That new process, still single-threaded (the kernel lets only such a process change its mount
//! namespace), enters the namespaces of the host's PID 1 and runs the command as its child, so that
//! the command is in the host's PID namespace too and sees the host's files and binaries.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::{Command, ExitCode, Stdio};

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

/// The hidden subcommand the agent starts.
pub const SUBCOMMAND: &str = "host-exec";
/// Its exit code when it cannot enter the host or start the command: the agent reads it as
/// "cannot tell" (neither 0 nor 1), with what it wrote to stderr.
const CANNOT: u8 = 2;

/// The namespaces entered, the mount namespace last: every link is opened first, through the
/// agent's /proc, where PID 1 is the host's (the pod has `hostPID: true`).
const NAMESPACES: [(&str, LinkNameSpaceType); 5] = [
    ("ipc", LinkNameSpaceType::InterProcessCommunication),
    ("uts", LinkNameSpaceType::HostNameAndNISDomainName),
    ("net", LinkNameSpaceType::Network),
    ("pid", LinkNameSpaceType::ProcessID),
    ("mnt", LinkNameSpaceType::Mount),
];

/// `slipway host-exec -- COMMAND...`: what `--sentinel-in-host` runs; not for people.
#[derive(clap::Args)]
pub struct HostExecArgs {
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// Enters the host's namespaces and runs the command there; its exit code, or [`CANNOT`].
pub fn run(args: &HostExecArgs) -> ExitCode {
    if let Err(why) = enter_host() {
        eprintln!(
            "cannot enter the host's namespaces: {why} (the agent's pod needs hostPID and the rights deploy/components/reboot-agent/host-command gives)"
        );
        return ExitCode::from(CANNOT);
    }
    let Some((program, rest)) = args.command.split_first() else {
        return ExitCode::from(CANNOT);
    };
    match Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .status()
    {
        Ok(status) => match status.code().and_then(|c| u8::try_from(c).ok()) {
            Some(code) => ExitCode::from(code),
            None => {
                eprintln!("{program}: {status}");
                ExitCode::from(CANNOT)
            }
        },
        Err(e) => {
            eprintln!("cannot run {program:?} on the host: {e}");
            ExitCode::from(CANNOT)
        }
    }
}

fn enter_host() -> Result<(), String> {
    let mut links = Vec::new();
    for (name, kind) in NAMESPACES {
        let path = format!("/proc/1/ns/{name}");
        let link = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        links.push((path, link, kind));
    }
    for (path, link, kind) in &links {
        move_into_link_name_space(link.as_fd(), Some(*kind)).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// Runs `words` in the host's namespaces through this binary (blocking): the exit code, or why
/// it could not tell, with the end of what it wrote to stderr.
pub fn sentinel(words: &[String]) -> Result<Option<i32>, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let out = Command::new(me)
        .arg(SUBCOMMAND)
        .arg("--")
        .args(words)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start {SUBCOMMAND}: {e}"))?;
    match out.status.code() {
        Some(code) if code == i32::from(CANNOT) && !out.stderr.is_empty() => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim();
            // The end is what says why; bounded, as it goes into the log.
            let start = said.char_indices().rev().nth(299).map_or(0, |(i, _)| i);
            Err(said[start..].to_string())
        }
        code => Ok(code),
    }
}
