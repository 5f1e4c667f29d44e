//! `airlock ca`: create, locate and show the local CA that signs interception certificates.
//!
//! The CA lives in [`airlock_proxy::ca::default_dir`]; errors ([`CaError`]) go to stderr
//! prefixed `airlock: ` and exit 1 (usage errors are clap's, exit 2).

use crate::out::{out, outln};
use airlock_proxy::ca::{self, CaError, CertificateAuthority, InitOutcome};

/// Subcommands of `airlock ca`.
#[derive(clap::Subcommand)]
pub(crate) enum CaCommand {
    /// Create the CA unless one exists (then keep it and say so).
    Init {
        /// Replace an existing CA with a new one.
        #[arg(long)]
        force: bool,
    },
    /// Print the certificate (PEM) and its SHA-256 fingerprint.
    Show,
    /// Print the absolute path of the CA certificate.
    Path,
}

/// Runs one `airlock ca` subcommand.
pub(crate) fn run(cmd: CaCommand) -> Result<(), CaError> {
    let dir = ca::default_dir()?;
    let cert_path = dir.join(ca::CERT_FILE);
    match cmd {
        CaCommand::Init { force } => match ca::init(&dir, force)? {
            InitOutcome::Created => {
                outln!("created a new CA: {}", cert_path.display());
                outln!("its key: {} (mode 0600)", dir.join(ca::KEY_FILE).display());
            }
            InitOutcome::Kept => {
                outln!(
                    "kept the existing CA: {} (use --force to replace it)",
                    cert_path.display()
                );
            }
        },
        CaCommand::Path => {
            if !cert_path.is_file() || !dir.join(ca::KEY_FILE).is_file() {
                return Err(CaError::Missing { dir });
            }
            outln!("{}", cert_path.display());
        }
        CaCommand::Show => {
            let authority = CertificateAuthority::load_dir(&dir)?;
            out!("{}", authority.cert_pem());
            outln!("SHA-256 fingerprint: {}", authority.fingerprint_sha256());
        }
    }
    Ok(())
}
