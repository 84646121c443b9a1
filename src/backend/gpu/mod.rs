//! The GPU backend on wgpu (being written).
