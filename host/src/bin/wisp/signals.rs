//! The process's signals: SIGTERM and Ctrl-C stop, SIGHUP reloads.

/// Completes at the first Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// SIGHUP, caught from the moment it is installed: its default action would end the process
/// (a standby, a host still compiling its plugins).
#[cfg(unix)]
pub type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
pub type Hangups = ();

pub fn catch_sighup() -> Hangups {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "SIGHUP not handled"))
            .ok()
    }
}

/// Each SIGHUP re-reads the config and reloads every plugin; a replica that cannot (a standby,
/// a host shutting down) logs why and goes on.
pub async fn reload_on_sighup(hups: Hangups, reload: wisp_host::admin::ReloadFn) {
    #[cfg(unix)]
    {
        let Some(mut hup) = hups else {
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config and every plugin");
            let r = reload.clone();
            match tokio::task::spawn_blocking(move || r(None)).await {
                Ok(Ok(done)) => tracing::info!("{done}"),
                Ok(Err(wisp_host::admin::ReloadError::Refused(why))) => {
                    tracing::warn!("SIGHUP: reload refused: {why}")
                }
                Ok(Err(e)) => tracing::warn!("SIGHUP: reload refused: {e:?}"),
                Err(e) => tracing::error!(error = %e, "reload failed"),
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (hups, reload);
}
