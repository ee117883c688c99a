//! `wisp push`: a module to an OCI registry, signed with `--sign` when given.

use std::path::PathBuf;

use anyhow::Context;

/// Publish a plugin module to an OCI registry (signed with --sign)
///
/// Pushes config application/vnd.wasm.config.v0+json, one application/wasm layer and an OCI
/// image manifest, and prints its digest; with --sign, also a Sigstore bundle (v0.3, keyed, as
/// cosign 3 writes) attached as an OCI 1.1 referrer (referrers tag sha256-HEX where the
/// registry has no referrers API). See docs/oci.md.
#[derive(clap::Args)]
pub struct Args {
    /// The component (.wasm).
    module: PathBuf,
    /// Where: oci://REGISTRY/REPOSITORY:TAG.
    reference: String,
    /// Sign with this PEM PKCS#8 ECDSA P-256 private key
    /// (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`).
    #[arg(long, value_name = "KEY.pem")]
    sign: Option<PathBuf>,
    /// With --sign: also write the legacy cosign signature at tag sha256-HEX.sig (what
    /// cosign 2 and older Wisp read).
    #[arg(long, requires = "sign")]
    legacy_signature: bool,
    /// Docker config JSON with the registry's credentials (`auths`).
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
    /// PEM CA certificates to trust besides the system's.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Reach the registry over plain http.
    #[arg(long)]
    insecure: bool,
}

pub async fn run(a: Args) -> anyhow::Result<()> {
    let r = wisp_host::oci::Reference::parse(&a.reference)
        .map_err(|e| anyhow::anyhow!("reference: {e}"))?;
    let bytes =
        std::fs::read(&a.module).with_context(|| format!("module {}", a.module.display()))?;
    let cfg = wisp_host::config::OciConfig {
        docker_config: a.docker_config,
        ca_file: a.ca_file,
        insecure: if a.insecure {
            vec![r.registry.clone()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let cwd = std::env::current_dir()?;
    let settings = wisp_host::oci::Settings::from_config(&cfg, &cwd, None)
        .map_err(|(field, e)| anyhow::anyhow!("{}: {e}", field.replace("oci.", "--")))?;
    if let Some(k) = &a.sign
        && !k.is_file()
    {
        anyhow::bail!("--sign: key file {} does not exist", k.display());
    }
    let signing = a.sign.as_ref().map(|key| wisp_host::oci::push::Signing {
        key,
        legacy: a.legacy_signature,
    });
    let pushed = wisp_host::oci::push::push(&settings, &bytes, &r, signing).await?;
    println!("pushed {r}@{}", pushed.digest);
    if let Some(b) = pushed.bundle {
        println!("signed: Sigstore bundle {}@{b}", r.repo_path());
    }
    if let Some(t) = pushed.signature_tag {
        println!("signed (legacy): {}:{t}", r.repo_path());
    }
    Ok(())
}
