//! Error kinds shared by every layer.
//!
//! The core never builds JS errors: it reports a kind and a message, and the
//! binding layer turns the kind into the exact JS exception the WebNN spec
//! names (TypeError or a DOMException of that name).

use std::fmt;

/// The exception kinds that the WebNN spec uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Invalid arguments (WebIDL conversion failures, builder validation).
    Type,
    /// Destroyed or lost objects, builders that already built.
    InvalidState,
    /// Failed builds, failed dispatches, errored tensors.
    Operation,
    /// Contexts or features that cannot be provided here.
    NotSupported,
    /// Failed tensor reads or writes.
    Unknown,
    /// Data that does not fit its destination.
    Data,
}

impl ErrorKind {
    /// The JS name of the exception (`TypeError`, or a DOMException name).
    pub fn js_name(self) -> &'static str {
        match self {
            ErrorKind::Type => "TypeError",
            ErrorKind::InvalidState => "InvalidStateError",
            ErrorKind::Operation => "OperationError",
            ErrorKind::NotSupported => "NotSupportedError",
            ErrorKind::Unknown => "UnknownError",
            ErrorKind::Data => "DataError",
        }
    }
}

/// An error with the kind that decides the JS exception, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn type_error(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Type, message)
    }
    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidState, message)
    }
    pub fn operation(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Operation, message)
    }
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotSupported, message)
    }
    pub fn unknown(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unknown, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.js_name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Builds a TypeError whose message starts with the operator name and its
/// label, the way every builder validation error is worded.
pub fn op_error(op: &str, label: &str, message: impl fmt::Display) -> Error {
    if label.is_empty() {
        Error::type_error(format!("{op}: {message}"))
    } else {
        Error::type_error(format!("{op} [{label}]: {message}"))
    }
}
