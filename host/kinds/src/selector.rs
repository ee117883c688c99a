//! Label and field selectors, parsed as apimachinery parses them: one parser of each for the
//! whole project (config validation, the `dir:` source's filter, the plugins' cache queries,
//! and the test API server).
//!
//! - [`label`]: `labels.Parse` (operators `=`, `==`, `!=`, `in`, `notin`, `!`, existence,
//!   `>`, `<`; keys qualified names, values label values).
//! - [`field`]: `fields.ParseSelector` (`=`, `==`, `!=`, `\` escapes). Which field labels a
//!   kind supports is [`crate::fields`]'s.

pub mod field;
pub mod label;

pub use field::{FieldRequirement, FieldSelector};
pub use label::LabelSelector;

/// A selector that does not parse.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("invalid {what} selector {selector:?}: {problem}")]
pub struct SelectorError {
    /// `label` or `field`.
    pub what: &'static str,
    /// The selector as given.
    pub selector: String,
    /// What is wrong, in apimachinery's words (what an API server answers in its 400).
    pub problem: String,
}

impl SelectorError {
    fn new(what: &'static str, selector: &str, problem: String) -> Self {
        Self {
            what,
            selector: selector.to_owned(),
            problem,
        }
    }
}
