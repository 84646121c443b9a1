//! The napi binding layer (being written).
