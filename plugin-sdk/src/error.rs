//! The error a plugin's methods return: [`Error`], with `?` from the SDK's own errors.

use std::fmt;

use crate::actions::ActionError;
use crate::cache;
use crate::policy::VerdictError;

/// Why a plugin's call failed. The host reads only its message: an error from
/// [`Plugin::init`](crate::Plugin::init) refuses the plugin with it (as
/// `settings.denyLatest: invalid type: ...` from [`parse_settings`](crate::parse_settings)), an
/// error from an event method is that notification's outcome, to which the host applies the
/// plugin's failure policy.
///
/// `?` makes one from a `String` or `&str`, from the SDK's errors (cache reads, verdicts,
/// actions, parsing an [`Object`](crate::Object)) and from `serde_json`'s; [`ResultExt`] says
/// what was being done:
///
/// ```
/// use wisp_sdk::{Error, ResultExt};
///
/// fn replicas(json: &str) -> wisp_sdk::Result<u64> {
///     let v: serde_json::Value = serde_json::from_str(json).context("reading the spec")?;
///     v["spec"]["replicas"]
///         .as_u64()
///         .ok_or_else(|| Error::new("spec.replicas: not a number"))
/// }
///
/// assert_eq!(replicas(r#"{"spec": {"replicas": 3}}"#).unwrap(), 3);
/// assert!(replicas("{").unwrap_err().message().starts_with("reading the spec: EOF"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

/// `Result` with the SDK's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
        }
    }

    /// The message, as the host shows it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message, taken.
    pub fn into_message(self) -> String {
        self.message
    }

    /// This error, its message prefixed with what was being done: `what: message`.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Error {
            message: format!("{what}: {}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The message alone, as `Display`: `unwrap()` on an `Err` prints what the host would show.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.message, f)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error { message }
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::new(message)
    }
}

/// For code that still speaks `Result<_, String>` (a helper written before [`Error`]).
impl From<Error> for String {
    fn from(e: Error) -> Self {
        e.message
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::new(e.to_string())
    }
}

impl From<cache::Error> for Error {
    fn from(e: cache::Error) -> Self {
        Error::new(format!("cache read refused: {e}"))
    }
}

impl From<VerdictError> for Error {
    fn from(e: VerdictError) -> Self {
        let (why, m) = match e {
            VerdictError::NotGranted(m) => ("informer not granted", m),
            VerdictError::NotFound(m) => ("object not in the cache", m),
            VerdictError::Invalid(m) => ("invalid", m),
        };
        Error::new(format!("verdict refused: {why}: {m}"))
    }
}

impl From<ActionError> for Error {
    fn from(e: ActionError) -> Self {
        let (why, m) = match e {
            ActionError::NotGranted(m) => ("not granted", m),
            ActionError::RateLimited(m) => ("rate limited", m),
            ActionError::Invalid(m) => ("invalid", m),
            ActionError::QueueFull(m) => ("queue full", m),
            ActionError::Unavailable(m) => ("unavailable", m),
        };
        Error::new(format!("action refused: {why}: {m}"))
    }
}

impl From<wisp_abi::DecodeError> for Error {
    fn from(e: wisp_abi::DecodeError) -> Self {
        Error::new(e.to_string())
    }
}

/// What was being done when a `Result` failed, as anyhow's `Context`: `.context("reading
/// namespace web")?` turns any error `?` takes into an [`Error`] whose message starts with that.
pub trait ResultExt<T> {
    /// On `Err`, an [`Error`] prefixed with `what`.
    fn context(self, what: impl fmt::Display) -> Result<T>;

    /// As [`context`](ResultExt::context), `what` computed only on `Err`.
    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().context(what))
    }

    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|e| e.into().context(what()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_errors_read_as_a_user_reads_them() {
        let e = Error::from(VerdictError::NotGranted("pods".into()));
        assert_eq!(e.message(), "verdict refused: informer not granted: pods");
        let e = Error::from(ActionError::RateLimited("10/s".into()));
        assert_eq!(e.message(), "action refused: rate limited: 10/s");
        let e = Error::from(cache::Error::BadSelector("app in (".into()));
        assert_eq!(
            e.message(),
            "cache read refused: bad label selector: app in ("
        );
    }

    #[test]
    fn context_prefixes_and_string_round_trips() {
        let r: std::result::Result<(), &str> = Err("no such key");
        let e = r.context("reading namespace web").unwrap_err();
        assert_eq!(e.to_string(), "reading namespace web: no such key");
        assert_eq!(format!("{e:?}"), "\"reading namespace web: no such key\"");
        let s: String = e.into();
        assert_eq!(s, "reading namespace web: no such key");
        let mut called = false;
        let ok: Result<u8> = Ok::<u8, String>(1).with_context(|| {
            called = true;
            "unused"
        });
        assert_eq!(ok.unwrap(), 1);
        assert!(!called, "with_context formats only on Err");
    }
}
