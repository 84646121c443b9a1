//! `MLTensor` and `MLGraph`.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use napi::bindgen_prelude::{ClassInstance, FromNapiValue, ObjectFinalize};
use napi::sys::napi_env;
use napi_derive::napi;

use super::raw::JsRaw;
use super::shared::{CtxShared, TensorInfo};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::timeline::Command;

/// `MLTensor`.
#[napi(js_name = "MLTensor", custom_finalize)]
pub struct MLTensor {
    pub(crate) info: TensorInfo,
    /// Shared with the builders that embed this tensor as a constant, whose
    /// `build()` must refuse a destroyed one.
    pub(crate) destroyed: Rc<Cell<bool>>,
    /// Bytes reported to V8 for this object: the finalizer gives back
    /// exactly this (V8 aborts when its external memory goes negative).
    reported: Cell<i64>,
    /// Exported to a GPUDevice (`exportToGPU`) and not yet returned: the
    /// device has it, so WebNN may neither use nor read nor write it.
    pub(crate) rented: Cell<bool>,
}

impl MLTensor {
    pub fn new(info: TensorInfo) -> Self {
        MLTensor {
            info,
            destroyed: Rc::new(Cell::new(false)),
            reported: Cell::new(0),
            rented: Cell::new(false),
        }
    }

    /// Unwraps an `MLTensor` argument, or a TypeError.
    pub fn from_arg<'a>(
        env: napi_env,
        v: JsRaw,
        what: impl std::fmt::Display,
    ) -> Result<ClassInstance<'a, MLTensor>> {
        // SAFETY: the current callback's env and an argument handle
        // (raw.rs's rules); `from_napi_value` unwraps only an object napi-rs
        // wrapped as an MLTensor (type tag and class checked), else an
        // error; the argument keeps it alive for the callback, and callers
        // keep the instance no longer (its lifetime is theirs to bound);
        // MLTensor has no `&mut self` method to alias.
        unsafe { ClassInstance::<MLTensor>::from_napi_value(env, v.0) }
            .map_err(|_| Error::type_error(format!("{what} must be an MLTensor")))
    }

    /// Checks that the tensor belongs to `ctx` and is alive (TypeError
    /// otherwise, as the spec's steps say).
    /// `what` names the argument in an error; it is formatted only then.
    pub fn check_usable(&self, ctx: &CtxShared, what: impl std::fmt::Display) -> Result<()> {
        if self.info.ctx.id != ctx.id {
            return Err(Error::type_error(format!(
                "{what} belongs to another MLContext"
            )));
        }
        if self.destroyed.get() {
            return Err(Error::type_error(format!("{what} is destroyed")));
        }
        if self.rented.get() {
            return Err(Error::type_error(format!(
                "{what} is exported to a GPUDevice until its GPUBuffer is destroyed"
            )));
        }
        Ok(())
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.get()
    }
}

#[napi]
impl MLTensor {
    #[napi(getter)]
    pub fn data_type(&self) -> &'static str {
        self.info.desc.data_type.name()
    }

    #[napi(getter)]
    pub fn shape(&self) -> Vec<u32> {
        self.info.desc.shape.iter().map(|&d| d as u32).collect()
    }

    #[napi(getter)]
    pub fn readable(&self) -> bool {
        self.info.readable
    }

    #[napi(getter)]
    pub fn writable(&self) -> bool {
        self.info.writable
    }

    #[napi(getter)]
    pub fn constant(&self) -> bool {
        self.info.constant.is_some()
    }

    #[napi(getter)]
    pub fn label(&self) -> String {
        self.info.label.clone()
    }

    /// Whether `exportToGPU()` takes this tensor.
    #[napi(getter, js_name = "exportableToGPU")]
    pub fn exportable_to_gpu(&self) -> bool {
        self.info.exportable
    }

    /// `destroy()`: idempotent; pending reads reject with
    /// InvalidStateError; queued work that uses the tensor still completes
    /// because the release is queued behind it.
    #[napi]
    pub fn destroy(&self, env: napi::Env) {
        if self.destroyed.replace(true) {
            return;
        }
        super::shared::reject_all(
            env.raw(),
            self.info.ctx.id,
            Some(self.info.id),
            &Error::invalid_state("the MLTensor was destroyed before the read completed"),
        );
        let _ = self
            .info
            .ctx
            .send(Command::DestroyTensor { id: self.info.id });
    }
}

/// The way back of a tensor exported to WebGPU (not API: the JS layer's
/// handle). The context's worker waits at the tensor's return until
/// [`fill`](MLExportReturn::fill) or [`fail`](MLExportReturn::fail)
/// answers, or until this object is collected, which also answers.
#[napi(js_name = "MLExportReturn")]
pub struct MLExportReturn {
    pub(crate) data_type: crate::types::DataType,
    pub(crate) element_count: usize,
    pub(crate) byte_length: usize,
    pub(crate) sender:
        Option<crossbeam_channel::Sender<std::result::Result<crate::tensor::Buf, String>>>,
    /// The context's count of returns still unanswered (`computeSync`
    /// refuses to block on a worker that waits for this thread).
    pub(crate) waiting: Rc<Cell<usize>>,
}

impl MLExportReturn {
    fn answer(&mut self, answer: std::result::Result<crate::tensor::Buf, String>) {
        if let Some(s) = self.sender.take() {
            // The worker may be gone with its context: nothing waits then.
            let _ = s.send(answer);
            self.waiting.set(self.waiting.get().saturating_sub(1));
        }
    }
}

#[napi]
impl MLExportReturn {
    /// The tensor's new contents: the first `byteLength` bytes of `data`
    /// (a mapped GPUBuffer range, padded to 4 bytes), copied now.
    #[napi]
    pub fn fill(&mut self, env: napi::Env, data: JsRaw) -> napi::Result<()> {
        let e = env.raw();
        let r = (|| {
            let src = super::convert::buffer_source(e, data.0, "the returned contents")?;
            if src.len < self.byte_length {
                return Err(Error::type_error(format!(
                    "the returned contents have {} bytes but the tensor has {}",
                    src.len, self.byte_length
                )));
            }
            // SAFETY: the source is alive during this call and holds at
            // least byte_length bytes (checked above); copied here.
            let bytes = unsafe { src.bytes() };
            let buf = crate::tensor::Buf::from_bytes(
                self.data_type,
                &bytes[..self.byte_length],
                self.element_count,
            )?;
            self.answer(Ok(buf));
            Ok(())
        })();
        super::errors::or_throw(e, r)
    }

    /// No contents came back: the tensor becomes errored with `cause`.
    #[napi]
    pub fn fail(&mut self, cause: String) {
        self.answer(Err(cause));
    }
}

impl Drop for MLExportReturn {
    fn drop(&mut self) {
        self.answer(Err(
            "its contents never came back from WebGPU (the return was abandoned)".into(),
        ));
    }
}

/// Bytes of native memory an object keeps alive, reported to V8 so that
/// garbage collection runs when dropped tensors and graphs add up.
fn external_bytes(n: usize) -> i64 {
    n.min(i64::MAX as usize) as i64
}

/// Tells V8 about `bytes` more external memory and records what was
/// accepted in `reported`, so that [`give_back`] undoes exactly that.
fn report(env: &napi::Env, reported: &Cell<i64>, bytes: usize) {
    let n = external_bytes(bytes);
    if n > 0 && env.adjust_external_memory(n).is_ok() {
        reported.set(reported.get() + n);
    }
}

/// Gives back to V8 what [`report`] recorded, once.
fn give_back(env: &napi::Env, reported: &Cell<i64>) {
    let n = reported.replace(0);
    if n > 0 {
        let _ = env.adjust_external_memory(-n);
    }
}

impl MLTensor {
    /// Reports the tensor's memory to V8 (undone when it is collected).
    pub fn report_memory(&self, env: &napi::Env) {
        report(env, &self.reported, self.info.desc.byte_length());
    }
}

impl ObjectFinalize for MLTensor {
    fn finalize(self, env: napi::Env) -> napi::Result<()> {
        give_back(&env, &self.reported);
        Ok(())
    }
}

impl MLGraph {
    /// Reports the graph's constants to V8 (undone when it is collected).
    pub fn report_memory(&self, env: &napi::Env) {
        report(env, &self.reported, self.constant_bytes);
    }
}

impl ObjectFinalize for MLGraph {
    fn finalize(self, env: napi::Env) -> napi::Result<()> {
        give_back(&env, &self.reported);
        Ok(())
    }
}

impl Drop for MLTensor {
    fn drop(&mut self) {
        // Garbage collection releases the backend memory too.
        if !self.destroyed.get() {
            let _ = self
                .info
                .ctx
                .send(Command::DestroyTensor { id: self.info.id });
        }
    }
}

/// `MLGraph`.
#[napi(js_name = "MLGraph", custom_finalize)]
pub struct MLGraph {
    pub(crate) ctx: Rc<CtxShared>,
    pub(crate) id: u64,
    /// The graph's interface ([`Graph::interface`]): its backend holds
    /// the rest.
    pub(crate) graph: Arc<Graph>,
    pub(crate) destroyed: Cell<bool>,
    /// The bytes of the graph's constants, reported to V8.
    constant_bytes: usize,
    /// Bytes reported to V8 (see `MLTensor::reported`).
    reported: Cell<i64>,
}

impl MLGraph {
    /// The graph `build()` made, once its backend has it.
    pub fn new(ctx: Rc<CtxShared>, id: u64, graph: &Graph) -> Self {
        MLGraph {
            ctx,
            id,
            graph: Arc::new(graph.interface()),
            destroyed: Cell::new(false),
            constant_bytes: graph.constant_bytes(),
            reported: Cell::new(0),
        }
    }

    pub fn from_arg<'a>(env: napi_env, v: JsRaw) -> Result<ClassInstance<'a, MLGraph>> {
        // SAFETY: as in `MLTensor::from_arg`, for an MLGraph (whose one
        // method, `destroy`, takes `&self`).
        unsafe { ClassInstance::<MLGraph>::from_napi_value(env, v.0) }
            .map_err(|_| Error::type_error("graph must be an MLGraph"))
    }

    /// TypeError for another context's graph; InvalidStateError once
    /// destroyed.
    pub fn check_usable(&self, ctx: &CtxShared) -> Result<()> {
        if self.ctx.id != ctx.id {
            return Err(Error::type_error(
                "the MLGraph belongs to another MLContext",
            ));
        }
        if self.destroyed.get() || ctx.is_lost() {
            return Err(Error::invalid_state("the MLGraph is destroyed"));
        }
        Ok(())
    }
}

#[napi]
impl MLGraph {
    /// `destroy()`: later dispatches throw InvalidStateError; the compiled
    /// form is released after the work already queued.
    #[napi]
    pub fn destroy(&self) {
        if !self.destroyed.replace(true) {
            let _ = self.ctx.send(Command::DestroyGraph { id: self.id });
        }
    }
}

impl Drop for MLGraph {
    fn drop(&mut self) {
        if !self.destroyed.get() {
            let _ = self.ctx.send(Command::DestroyGraph { id: self.id });
        }
    }
}

/// What V8 counts as this isolate's external memory (every report above
/// added, every finalizer gave back), read without changing it; the tests
/// check that it returns to where it was once objects are collected.
#[napi(js_name = "externalMemory")]
pub fn external_memory(env: napi::Env) -> napi::Result<i64> {
    env.adjust_external_memory(0)
}

/// The vectors the CPU backend's kernels run on in this process (not
/// public API: the bench prints it).
#[napi(js_name = "cpuIsa")]
pub fn cpu_isa() -> String {
    crate::backend::cpu::isa_report()
}

/// The float32 multiply-add peak, measured now (see
/// `backend::cpu::sgemm::peak`): the benchmark's denominator for every
/// GEMM-bound row. Not public API. `isa` defaults to the GEMM kernel's
/// instruction set; `millis` is each of the four rounds' length (the
/// first a warm-up). It blocks the calling thread for that long, which a
/// benchmark wants (nothing else should run meanwhile).
#[napi(js_name = "cpuPeak")]
pub fn cpu_peak(threads: u32, millis: u32, isa: Option<String>) -> napi::Result<CpuPeak> {
    use crate::backend::cpu;
    if !(1..=1024).contains(&threads) || !(1..=10_000).contains(&millis) {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "cpuPeak: threads in 1..=1024 and millis in 1..=10000",
        ));
    }
    let isa = isa.unwrap_or_else(|| cpu::gemm_isa().to_string());
    let run = std::time::Duration::from_millis(millis.into());
    let p = cpu::measure_peak(&isa, threads as usize, run).ok_or_else(|| {
        napi::Error::new(
            napi::Status::InvalidArg,
            format!(
                "cpuPeak: {isa} is not an instruction set of this CPU ({})",
                cpu::peak_isas().join(", ")
            ),
        )
    })?;
    Ok(CpuPeak {
        isa: p.isa.to_string(),
        threads,
        gflops: p.gflops,
    })
}

/// The one-row quantized product's bytes of weights read per second and
/// a read loop's over as many bytes (see
/// `backend::cpu::qgemm::measure`): how near a decoding step's products
/// are to the memory's limit. Not public API: `bench/llm.js` prints it.
/// Blocks the calling thread for about eight times `millis`.
#[napi(js_name = "cpuQgemv")]
pub fn cpu_qgemv(threads: u32, millis: u32, bytes: f64) -> napi::Result<CpuQgemv> {
    if !(1..=1024).contains(&threads)
        || !(1..=10_000).contains(&millis)
        || !(1.0..=(1u64 << 30) as f64).contains(&bytes)
    {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "cpuQgemv: threads in 1..=1024, millis in 1..=10000, bytes in 1..=2^30",
        ));
    }
    let run = std::time::Duration::from_millis(millis.into());
    let r = crate::backend::cpu::measure_gemv(threads as usize, bytes as usize, run)
        .map_err(|e| napi::Error::new(napi::Status::GenericFailure, e.to_string()))?;
    Ok(CpuQgemv {
        isa: r.isa.to_string(),
        threads,
        bytes: r.bytes as f64,
        weights_gbps: r.weights / 1e9,
        read_gbps: r.read / 1e9,
    })
}

/// One [`cpu_qgemv`] measurement, in GB/s.
#[napi(object)]
pub struct CpuQgemv {
    pub isa: String,
    pub threads: u32,
    pub bytes: f64,
    pub weights_gbps: f64,
    pub read_gbps: f64,
}

/// One [`cpu_peak`] measurement.
#[napi(object)]
pub struct CpuPeak {
    pub isa: String,
    pub threads: u32,
    pub gflops: f64,
}
