//! A plugin's stdout and stderr: lines go to the host log, tagged with the plugin's name,
//! within its log budget (see [`LogRing::emit`](super::status::LogRing::emit)). Nothing reaches
//! the host's own stdio.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::spec::LogLevel;
use super::status::PluginStatus;

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

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
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
                LogLevel::Info,
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
