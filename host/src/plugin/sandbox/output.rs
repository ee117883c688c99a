//! A plugin's stdout and stderr: lines go to the host log, tagged with the plugin's name,
//! within its log budget (see [`LogRing::emit`](crate::plugin::status::LogRing::emit)): stdout at INFO,
//! stderr at WARN (where interpreters write tracebacks and Rust writes panics). Nothing reaches
//! the host's own stdio.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use crate::plugin::spec::LogLevel;
use crate::plugin::status::PluginStatus;
use crate::sync::lock;

/// Longest line kept; longer output is cut into pieces of this size.
const MAX_LINE: usize = 8 * 1024;

/// A line-buffered sink that logs each line with the plugin's name.
#[derive(Clone)]
pub struct LogStream {
    plugin: Arc<str>,
    stream: &'static str,
    buf: Arc<Mutex<Vec<u8>>>,
    status: Arc<PluginStatus>,
}

impl LogStream {
    /// A sink for `plugin`'s `stream` ("stdout" or "stderr").
    pub fn new(plugin: Arc<str>, stream: &'static str, status: Arc<PluginStatus>) -> Self {
        Self {
            plugin,
            stream,
            buf: Arc::default(),
            status,
        }
    }

    /// The level of its lines in the host log: WARN for stderr, INFO for stdout.
    fn level(&self) -> LogLevel {
        if self.stream == "stderr" {
            LogLevel::Warn
        } else {
            LogLevel::Info
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = lock(&self.buf);
        buf.extend_from_slice(bytes);
        while let Some(pos) = buf
            .iter()
            .position(|b| *b == b'\n')
            .or((buf.len() >= MAX_LINE).then_some(MAX_LINE))
        {
            let end = pos.min(buf.len());
            let line: Vec<u8> = buf.drain(..end).collect();
            if buf.first() == Some(&b'\n') {
                buf.remove(0);
            }
            let text = String::from_utf8_lossy(&line);
            self.status.logs.emit(
                &self.plugin,
                self.level(),
                self.stream,
                &text,
                &self.status.counters.log_lines_dropped,
            );
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the host log receives, as the fmt layer writes it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn stderr_lines_are_logged_at_warn_and_stdout_lines_at_info() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let status = Arc::new(PluginStatus::default());
        tracing::subscriber::with_default(subscriber, || {
            let err = LogStream::new("py".into(), "stderr", status.clone());
            let stdout = LogStream::new("py".into(), "stdout", status.clone());
            err.push(b"Traceback (most recent call last):\n");
            stdout.push(b"hello\n");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle:?} in {text}"))
                .to_owned()
        };
        assert!(line("Traceback").contains("WARN"), "{text}");
        assert!(line("hello").contains("INFO"), "{text}");
        // The plugin's log ring keeps the stream as the tag.
        let kept = status.logs.since(0);
        assert_eq!(
            kept,
            vec![
                "stderr: Traceback (most recent call last):".to_owned(),
                "stdout: hello".to_owned()
            ]
        );
    }
}
