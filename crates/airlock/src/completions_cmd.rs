//! `airlock completions SHELL` and `airlock man`: the shell completion scripts
//! (`clap_complete`) and the manual pages (`clap_mangen`), generated at run time from the
//! same command-line definition that parses the arguments, so they never fall behind it.
//! Installing them is in README.md ("Install").

use std::path::PathBuf;
use std::process::ExitCode;

/// `airlock completions` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `airlock man` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct ManArgs {
    /// Write `airlock.1` and one page per subcommand (`airlock-run.1`, ...) into DIR
    /// instead of printing `airlock.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` on standard output.
pub(crate) fn completions(args: &CompletionsArgs, mut command: clap::Command) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "airlock", &mut script);
    crate::out::write_bytes(&script);
    ExitCode::SUCCESS
}

/// Prints `airlock(1)`, or writes every page into `--dir`.
pub(crate) fn man(args: &ManArgs, command: clap::Command) -> Result<ExitCode, String> {
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        clap_mangen::generate_to(command, dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| format!("cannot render the manual page: {e}"))?;
    crate::out::write_bytes(&page);
    Ok(ExitCode::SUCCESS)
}
