//! `wisp rbac`: the ServiceAccount and least-privilege roles a config needs.

use std::path::PathBuf;

use wisp_host::config::Config;

/// Print the least-privilege RBAC a config needs
///
/// The ServiceAccount and roles the config needs (list, watch, and the verbs of the plugins'
/// action grants): a Role and RoleBinding in each namespace an informer or grant names, however
/// many; a ClusterRole only for what covers all namespaces or cluster-scoped kinds.
#[derive(clap::Args)]
pub struct Args {
    /// Config file (YAML).
    #[arg(long, short)]
    config: PathBuf,
    /// Name of the ServiceAccount and roles.
    #[arg(long, default_value = "wisp")]
    name: String,
    /// Namespace the host runs in.
    #[arg(long, default_value = "wisp")]
    namespace: String,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let cfg = Config::load(&a.config)?;
    print!("{}", wisp_host::rbac::generate(&cfg, &a.name, &a.namespace));
    Ok(())
}
