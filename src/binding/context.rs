//! `ml.createContext()` and the methods of `MLContext` (the struct and
//! the state it holds are in `shared`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use napi::bindgen_prelude::ClassInstance;
use napi::sys::{napi_env, napi_value};
use napi::{Env, ValueType};
use napi_derive::napi;

use super::completion;
use super::convert::{buffer_source, to_val};
use super::errors::{from_napi, js_error, or_throw, promise};
use super::raw::{self, JsRaw, StrongRef};
use super::shared::{self, CtxShared, MLContext, PendingKind, TensorInfo};
use super::tensor::{MLExportReturn, MLGraph, MLTensor};
use super::views::{self, ComputeArg, OutView};
use crate::backend::Backend;
use crate::copy::{CopyHelp, HelperPool};
use crate::error::{Error, Result};
use crate::graph::args::{descriptor, Ctx, Val};
use crate::graph::Graph;
use crate::tensor::Buf;
use crate::timeline::{BackendFactory, Command, Payload, Responder, Timeline};
use crate::types::DataType;

static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

impl MLContext {
    /// The arguments of compute and computeSync: the graph (this context's,
    /// alive) and the input and output views, checked against its inputs
    /// and outputs.
    fn compute_call<'a>(
        &self,
        e: napi_env,
        graph: JsRaw,
        inputs: JsRaw,
        outputs: JsRaw,
    ) -> Result<(ClassInstance<'a, MLGraph>, Vec<ComputeArg>, Vec<ComputeArg>)> {
        let g = MLGraph::from_arg(e, graph)?;
        let (ins, outs) = compute_args(e, &g.graph, inputs, outputs)?;
        // After the records: their getters may destroy the graph.
        g.check_usable(&self.shared)?;
        Ok((g, ins, outs))
    }

    /// Fails `what` (createTensor, createConstantTensor) once the context
    /// is lost.
    fn check_live(&self, what: &str) -> Result<()> {
        if self.shared.is_lost() {
            return Err(Error::invalid_state(format!(
                "{what}: the MLContext is lost"
            )));
        }
        Ok(())
    }

    /// A new tensor of this context: `readable`, `writable` as given, and
    /// `constant` holding a constant tensor's bytes.
    fn tensor_info(
        &self,
        desc: crate::types::OperandDescriptor,
        label: String,
        readable: bool,
        writable: bool,
        constant: Option<Arc<Vec<u8>>>,
        exportable: bool,
    ) -> TensorInfo {
        TensorInfo {
            ctx: self.shared.clone(),
            id: self.shared.next_id(),
            desc,
            readable,
            writable,
            constant,
            label,
            exportable,
        }
    }

    /// `createTensor(descriptor)`, and the tensors of
    /// `createExportableTensor()` when `exportable`.
    fn create(&self, e: napi_env, desc: JsRaw, exportable: bool) -> napi::Result<JsRaw> {
        let what = match exportable {
            true => "createExportableTensor",
            false => "createTensor",
        };
        let r = || {
            self.check_live(what)?;
            let ctx = Ctx::new(what);
            let v = to_val(e, desc.0)?;
            let d = descriptor(&ctx, &v)?;
            self.shared.check_size(&d, what)?;
            let readable = ctx.bool_or(v.member("readable"), "readable", false)?;
            let label = ctx
                .opt_string(v.member("label"), "label")?
                .unwrap_or_default();
            let writable = ctx.bool_or(v.member("writable"), "writable", false)?;
            let info = self.tensor_info(d, label, readable, writable, None, exportable);
            let (_, p) = map_err(self.send_create(e, info, true))?;
            Ok(p)
        };
        promise(e, r)
    }

    /// An exportable tensor of this context, alive, for `exportToGPU`:
    /// TypeError for a non-MLTensor, another context's tensor or one not
    /// exportable; InvalidStateError once it or the context is destroyed.
    fn exported<'a>(&self, e: napi_env, tensor: JsRaw) -> Result<ClassInstance<'a, MLTensor>> {
        let t = MLTensor::from_arg(e, tensor, "exportToGPU: tensor")?;
        if t.info.ctx.id != self.shared.id {
            return Err(Error::type_error(
                "exportToGPU: the tensor belongs to another MLContext",
            ));
        }
        if !t.info.exportable {
            return Err(Error::type_error(
                "exportToGPU: the tensor is not exportable (createExportableTensor makes one)",
            ));
        }
        if t.is_destroyed() {
            return Err(Error::invalid_state("exportToGPU: the tensor is destroyed"));
        }
        self.check_live("exportToGPU")?;
        Ok(t)
    }

    /// Registers the promise of the tensor `info` and sends its creation,
    /// which settles the promise when `settle`; otherwise the caller sends
    /// the commands that do, with the returned request id.
    fn send_create(
        &self,
        e: napi_env,
        info: TensorInfo,
        settle: bool,
    ) -> napi::Result<(u64, napi_value)> {
        let (id, desc, label) = (info.id, info.desc.clone(), info.label.clone());
        let constant = info.constant.is_some();
        let (req, p) = shared::register(e, &self.shared, PendingKind::Tensor(info))?;
        self.shared.send_or_reject(
            e,
            req,
            Command::CreateTensor {
                id,
                desc,
                label,
                constant,
                respond: settle.then_some(Responder::Js(req)),
            },
        );
        Ok((req, p))
    }
}

fn map_err<T>(r: napi::Result<T>) -> Result<T> {
    r.map_err(from_napi)
}

/// The `label` of an optional options dictionary (extension on
/// `dispatch`, `writeTensor` and `build`).
pub fn label_of(env: napi_env, options: Option<JsRaw>, what: &str) -> Result<String> {
    let Some(o) = options else {
        return Ok(String::new());
    };
    let mut ctx = Ctx::new(what);
    ctx.options(&to_val(env, o.0)?)?;
    Ok(ctx.label)
}

/// Reads a record argument (`record<USVString, T>`): own enumerable keys.
fn record(env: napi_env, v: napi_value, what: &str) -> Result<Vec<(String, napi_value)>> {
    if map_err(raw::type_of(env, v))? != ValueType::Object {
        return Err(Error::type_error(format!(
            "{what} must be a record (a plain object)"
        )));
    }
    map_err(raw::entries(env, v))
}

/// An entry of a record argument, as errors name it (`inputs["x"]`):
/// formatted only when an error is made, not on every call.
#[derive(Clone, Copy)]
struct Entry<'a>(&'a str, &'a str);

impl std::fmt::Display for Entry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{:?}]", self.0, self.1)
    }
}

/// Matches named values to a graph's inputs or outputs: the same names,
/// returned in the graph's order.
fn match_names<T>(
    mut named: Vec<(String, T)>,
    expected: &[(String, usize)],
    what: &str,
) -> Result<Vec<(String, T)>> {
    if named.len() != expected.len() {
        return Err(Error::type_error(format!(
            "{what} has {} entries but the graph has {}: {:?}",
            named.len(),
            expected.len(),
            expected.iter().map(|(n, _)| n).collect::<Vec<_>>()
        )));
    }
    let missing = |name: &str| Error::type_error(format!("{what} has no entry named {name:?}"));
    let mut out = Vec::with_capacity(expected.len());
    if named.len() <= 16 {
        // Few entries (the rule): a linear scan beats hashing them.
        for (name, _) in expected {
            let pos = named
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| missing(name))?;
            out.push(named.swap_remove(pos));
        }
        return Ok(out);
    }
    // Many (a language model's cache: hundreds of tensors per dispatch):
    // by name, so that matching costs what the entries cost, not their
    // square. A record's keys are distinct.
    let mut by_name: std::collections::HashMap<String, T> = named.into_iter().collect();
    for (name, _) in expected {
        let (n, v) = by_name.remove_entry(name).ok_or_else(|| missing(name))?;
        out.push((n, v));
    }
    Ok(out)
}

/// Views of `compute()` / `computeSync()` checked against the graph.
///
/// Both records are read first, and only then are the views inspected:
/// reading a record runs the caller's getters, which may detach or resize
/// any buffer, so a view's data pointer and length are taken only once no
/// more user code can run before they are used.
fn compute_args(
    env: napi_env,
    graph: &Graph,
    inputs: JsRaw,
    outputs: JsRaw,
) -> Result<(Vec<ComputeArg>, Vec<ComputeArg>)> {
    let named = |v: JsRaw, expected: &[(String, usize)], what: &str| {
        match_names(record(env, v.0, what)?, expected, what)
    };
    let ins = named(inputs, &graph.inputs, "inputs")?;
    let outs = named(outputs, &graph.outputs, "outputs")?;
    let views = |named: Vec<(String, napi_value)>, expected: &[(String, usize)], what: &str| {
        named
            .into_iter()
            .zip(expected)
            .map(|((name, v), (_, operand))| {
                let label = format!("{what}[{name:?}]");
                let info = views::view(env, v, &label)?;
                views::check_fits(&info, &graph.operands[*operand], &label)?;
                Ok(ComputeArg { name, info })
            })
            .collect::<Result<Vec<_>>>()
    };
    Ok((
        views(ins, &graph.inputs, "inputs")?,
        views(outs, &graph.outputs, "outputs")?,
    ))
}

/// How to hand each of `args` (matched to `ends`, the graph's inputs or
/// outputs) back as a view of its kind over a new buffer: its name, kind
/// and length, and its element type.
fn views_back(
    graph: &Graph,
    args: &[ComputeArg],
    ends: &[(String, usize)],
) -> Vec<(String, OutView, DataType)> {
    args.iter()
        .zip(ends)
        .map(|(a, (_, op))| {
            let v = OutView {
                kind: a.info.kind,
                length: a.info.length,
            };
            (a.name.clone(), v, graph.operands[*op].data_type)
        })
        .collect()
}

/// Copies the input views into element buffers.
fn input_bufs(graph: &Graph, inputs: &[ComputeArg], help: &CopyHelp) -> Result<Vec<Buf>> {
    inputs
        .iter()
        .zip(&graph.inputs)
        .map(|(a, (_, op))| {
            let d = &graph.operands[*op];
            // SAFETY: `inputs` come from `compute_args` in this callback,
            // which read every view only after the last of the caller's
            // code (getters) ran, and no JS has run since (see the
            // callers), so each info still describes its view's memory.
            let bytes = unsafe { view_bytes(&a.info) };
            Buf::from_bytes_helped(d.data_type, bytes, d.element_count(), help)
        })
        .collect()
}

/// The bytes of a view, borrowed from JS memory.
///
/// # Safety
/// `info` must describe the view's memory now: read by `raw::view_info` in
/// the current callback with no JS code run since (a getter or a Proxy
/// trap could detach, transfer or resize the buffer), and the slice must
/// be dropped before any JS code runs (in practice: copied at once).
unsafe fn view_bytes(info: &raw::ViewInfo) -> &[u8] {
    if info.byte_length == 0 || info.data.is_null() {
        &[]
    } else {
        // SAFETY: the contract: `info.data` points to the view's
        // byte_length bytes, kept alive by the view's handle in this
        // callback and not changed by JS while the slice lives (no JS
        // runs). A SharedArrayBuffer's bytes may still be written by
        // another thread meanwhile, which JS allows to tear; the callers
        // only copy them.
        unsafe { std::slice::from_raw_parts(info.data, info.byte_length) }
    }
}

#[napi]
impl MLContext {
    /// Whether the context runs on an accelerator.
    #[napi(getter)]
    pub fn accelerated(&self) -> bool {
        self.shared.accelerated.get()
    }

    /// `lost`: a promise of `{message}` that resolves when the context is
    /// destroyed or its device fails.
    #[napi(getter)]
    pub fn lost(&self, env: Env) -> napi::Result<JsRaw> {
        let e = env.raw();
        let mut slot = self.shared.lost_promise.borrow_mut();
        if slot.is_none() {
            let (d, p) = raw::create_promise(e)?;
            let r = StrongRef::new(e, p)?;
            *slot = Some((r, Some(d)));
            drop(slot);
            if let Some(m) = self.shared.lost_message.borrow().clone() {
                self.shared.settle_lost(e, &m);
            }
            slot = self.shared.lost_promise.borrow_mut();
        }
        Ok(JsRaw(slot.as_ref().unwrap().0.get(e)?))
    }

    /// The `label` given to `createContext` (extension).
    #[napi(getter)]
    pub fn label(&self) -> String {
        self.shared.label.clone()
    }

    /// `destroy()`: rejects everything pending with InvalidStateError,
    /// resolves `lost`, and ends the timeline thread.
    #[napi]
    pub fn destroy(&self, env: Env) {
        let msg = match self.shared.label.as_str() {
            "" => "The MLContext was destroyed.".to_string(),
            l => format!("The MLContext '{l}' was destroyed."),
        };
        self.shared.lose(env.raw(), &msg);
    }

    /// `dispatch(graph, inputs, outputs)`: queued in order, returns at once.
    #[napi]
    pub fn dispatch(
        &self,
        env: Env,
        graph: JsRaw,
        inputs: JsRaw,
        outputs: JsRaw,
        options: Option<JsRaw>,
    ) -> napi::Result<()> {
        let e = env.raw();
        let r = (|| {
            // The arguments are converted (the caller's getters run) before
            // anything is checked, as WebIDL orders it: a getter may
            // destroy the graph or a tensor, which the checks then see.
            let g = MLGraph::from_arg(e, graph)?;
            let tensors =
                |v: JsRaw, what: &str| -> Result<Vec<(String, ClassInstance<MLTensor>)>> {
                    record(e, v.0, what)?
                        .into_iter()
                        .map(|(name, v)| {
                            let t = MLTensor::from_arg(e, JsRaw(v), Entry(what, &name))?;
                            Ok((name, t))
                        })
                        .collect()
                };
            let ins = tensors(inputs, "inputs")?;
            let outs = tensors(outputs, "outputs")?;
            let label = label_of(e, options, "dispatch")?;
            g.check_usable(&self.shared)?;
            // Each tensor once among the inputs and outputs (a set: a
            // language model's step binds hundreds).
            let mut seen: std::collections::HashSet<u64> =
                std::collections::HashSet::with_capacity(ins.len() + outs.len());
            let mut check = |named: Vec<(String, ClassInstance<MLTensor>)>,
                             expected: &[(String, usize)],
                             what: &str|
             -> Result<Vec<u64>> {
                let named = match_names(named, expected, what)?;
                named
                    .into_iter()
                    .zip(expected)
                    .map(|((name, t), (_, operand))| {
                        let label = Entry(what, &name);
                        t.check_usable(&self.shared, label)?;
                        if !seen.insert(t.info.id) {
                            return Err(Error::type_error(format!("{label}: a tensor may appear only once among the inputs and outputs")));
                        }
                        if t.info.constant.is_some() {
                            return Err(Error::type_error(format!("{label} is a constant tensor")));
                        }
                        if t.info.desc != g.graph.operands[*operand] {
                            let d = &g.graph.operands[*operand];
                            return Err(Error::type_error(format!(
                                "{label} is {} {:?} but the graph expects {} {:?}",
                                t.info.desc.data_type.name(),
                                t.info.desc.shape,
                                d.data_type.name(),
                                d.shape
                            )));
                        }
                        Ok(t.info.id)
                    })
                    .collect()
            };
            let ins = check(ins, &g.graph.inputs, "inputs")?;
            let outs = check(outs, &g.graph.outputs, "outputs")?;
            self.shared.send(Command::Dispatch {
                graph: g.id,
                inputs: ins,
                outputs: outs,
                label,
            })
        })();
        or_throw(e, r)
    }

    /// `createTensor(descriptor)`.
    #[napi]
    pub fn create_tensor(&self, env: Env, desc: JsRaw) -> napi::Result<JsRaw> {
        self.create(env.raw(), desc, false)
    }

    /// The native half of `createExportableTensor(descriptor, device)`
    /// (index.js checks the device and keeps it).
    #[napi(js_name = "_createExportableTensor")]
    pub fn create_exportable_tensor(&self, env: Env, desc: JsRaw) -> napi::Result<JsRaw> {
        self.create(env.raw(), desc, true)
    }

    /// The native half of `exportToGPU(tensor)`: rents the tensor out (it
    /// can no longer be dispatched, read or written) and reads its bytes
    /// after the work queued before; the promise resolves with them as an
    /// ArrayBuffer.
    #[napi(js_name = "_exportRead")]
    pub fn export_read(&self, env: Env, tensor: JsRaw) -> napi::Result<JsRaw> {
        let e = env.raw();
        let r = || {
            let t = self.exported(e, tensor)?;
            let kind = PendingKind::Read {
                data_type: t.info.desc.data_type,
                tensor: t.info.id,
            };
            let (req, p) = map_err(shared::register(e, &self.shared, kind))?;
            t.rented.set(true);
            self.shared.send_or_reject(
                e,
                req,
                Command::ReadTensor {
                    id: t.info.id,
                    respond: Responder::Js(req),
                    sent: std::time::Instant::now(),
                    shared: false,
                    into: None,
                },
            );
            Ok(p)
        };
        promise(e, r)
    }

    /// Ends a tensor's rent without contents coming back: the export
    /// failed before WebGPU had the buffer.
    #[napi(js_name = "_exportCancel")]
    pub fn export_cancel(&self, env: Env, tensor: JsRaw) -> napi::Result<()> {
        let e = env.raw();
        let t = or_throw(e, MLTensor::from_arg(e, tensor, "tensor"))?;
        t.rented.set(false);
        Ok(())
    }

    /// Ends a tensor's rent as WebGPU gives it back: queues the command
    /// that waits for the returned contents (every later command runs
    /// after them) and returns the handle that delivers them.
    #[napi(js_name = "_exportReturn")]
    pub fn export_return(&self, env: Env, tensor: JsRaw) -> napi::Result<MLExportReturn> {
        let e = env.raw();
        let r = (|| {
            let t = MLTensor::from_arg(e, tensor, "tensor")?;
            t.rented.set(false);
            let (sender, data) = crossbeam_channel::bounded(1);
            self.shared.send(Command::ReturnTensor {
                id: t.info.id,
                data,
                label: t.info.label.clone(),
            })?;
            let waiting = self.shared.returning.clone();
            waiting.set(waiting.get() + 1);
            Ok(MLExportReturn {
                data_type: t.info.desc.data_type,
                element_count: t.info.desc.element_count(),
                byte_length: t.info.desc.byte_length(),
                sender: Some(sender),
                waiting,
            })
        })();
        or_throw(e, r)
    }

    /// Which wgpu adapter a context of a GPUDevice runs on (not API: the
    /// tests and docs show it); `undefined` for other contexts.
    #[napi(js_name = "_adapter")]
    pub fn adapter(&self) -> Option<String> {
        self.shared
            .webgpu
            .as_ref()
            .map(|a| a.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Loses the context with `message` (its GPUDevice was lost).
    #[napi(js_name = "_lose")]
    pub fn lose_with(&self, env: Env, message: String) {
        self.shared.lose(env.raw(), &message);
    }

    /// `createConstantTensor(descriptor, data)`.
    #[napi]
    pub fn create_constant_tensor(
        &self,
        env: Env,
        desc: JsRaw,
        data: JsRaw,
    ) -> napi::Result<JsRaw> {
        let e = env.raw();
        let r = || {
            self.check_live("createConstantTensor")?;
            let ctx = Ctx::new("createConstantTensor");
            let v = to_val(e, desc.0)?;
            let d = descriptor(&ctx, &v)?;
            let label = ctx
                .opt_string(v.member("label"), "label")?
                .unwrap_or_default();
            self.shared.check_size(&d, "createConstantTensor")?;
            let bytes = check_source(e, data, &d, "createConstantTensor: data")?;
            // The bytes must hold values of the type (checked here, once,
            // without a copy: a model's weights are large).
            Buf::check_bytes(d.data_type, &bytes, d.element_count())?;
            let constant = Some(Arc::new(bytes));
            let info = self.tensor_info(d, label, false, false, constant, false);
            let (req, p) = map_err(self.send_create(e, info, false))?;
            // The backend's tensor only stands for the constant's lifetime
            // and memory: graphs read the bytes kept above (a constant
            // tensor can be neither dispatched nor read), so no copy of
            // them is written to it.
            // Resolve once the creation is done: a barrier queued behind it
            // proves it.
            self.shared.send_or_reject(
                e,
                req,
                Command::Barrier {
                    respond: Responder::Js(req),
                },
            );
            Ok(p)
        };
        promise(e, r)
    }

    /// `writeTensor(tensor, data)`: copies `data` now; the write is queued.
    #[napi]
    pub fn write_tensor(
        &self,
        env: Env,
        tensor: JsRaw,
        data: JsRaw,
        options: Option<JsRaw>,
    ) -> napi::Result<()> {
        let e = env.raw();
        let r = (|| {
            let t = MLTensor::from_arg(e, tensor, "writeTensor: tensor")?;
            t.check_usable(&self.shared, "writeTensor: tensor")?;
            if !t.info.writable {
                return Err(Error::type_error("writeTensor: the tensor is not writable"));
            }
            let d = &t.info.desc;
            let src = source_fits(e, data, d, "writeTensor: data", true)?;
            // SAFETY: `source_fits` read the source in this callback after
            // every conversion that can run the caller's code (the tensor
            // and data arguments; the options are read after this copy),
            // so it still describes live, unchanged memory; the bytes are
            // copied at once.
            let buf = Buf::from_bytes_helped(
                d.data_type,
                unsafe { src.bytes() },
                d.element_count(),
                &self.shared.copy_help,
            )?;
            let label = label_of(e, options, "writeTensor")?;
            self.shared.send(Command::WriteTensor {
                id: t.info.id,
                data: buf,
                label,
            })
        })();
        or_throw(e, r)
    }

    /// `readTensor(tensor)` and `readTensor(tensor, outputData)`.
    #[napi]
    pub fn read_tensor(
        &self,
        env: Env,
        tensor: JsRaw,
        output: Option<JsRaw>,
    ) -> napi::Result<JsRaw> {
        let e = env.raw();
        let output = output.filter(|o| raw::type_of(e, o.0).ok() != Some(ValueType::Undefined));
        let r = || {
            let t = MLTensor::from_arg(e, tensor, "readTensor: tensor")?;
            t.check_usable(&self.shared, "readTensor: tensor")?;
            if !t.info.readable {
                return Err(Error::type_error("readTensor: the tensor is not readable"));
            }
            let kind = match output {
                None => PendingKind::Read {
                    data_type: t.info.desc.data_type,
                    tensor: t.info.id,
                },
                Some(o) => {
                    source_fits(e, o, &t.info.desc, "readTensor: outputData", true)?;
                    PendingKind::ReadInto {
                        data_type: t.info.desc.data_type,
                        tensor: t.info.id,
                        view: map_err(StrongRef::new(e, o.0))?,
                    }
                }
            };
            let id = t.info.id;
            // Into a view, or a result for a new buffer that is small or
            // large (`views::read_shares`): the JS thread copies the
            // contents once, from the tensor's own buffer where the backend
            // shares it, and a large copy with the help of the context's
            // threads (see `crate::copy`).
            let shared = matches!(kind, PendingKind::ReadInto { .. })
                || views::read_shares(t.info.desc.byte_length());
            // The worker's copy for a new ArrayBuffer goes into memory
            // readied here, while the work before the read runs (see
            // `Buf::readied` and `spare_core`). A large result is copied
            // on this thread as the read completes, with the context's
            // threads' help, which share its page faults too; readying it
            // here, alone, gave no clear gain at one thread and was slower
            // at two (4 and 4.8 MB results on a 2-vCPU Zen 5).
            let into = match shared || !self.shared.spare_core {
                true => None,
                false => Buf::readied(t.info.desc.data_type, t.info.desc.element_count()),
            };
            let (req, p) = map_err(shared::register(e, &self.shared, kind))?;
            let waiting = completion::expect_soon(&self.shared.inbox);
            self.shared.send_or_reject(
                e,
                req,
                Command::ReadTensor {
                    id,
                    respond: Responder::Js(req),
                    sent: std::time::Instant::now(),
                    shared,
                    into,
                },
            );
            let inline = waiting
                && completion::settle_soon(
                    e,
                    self.shared.id,
                    &self.shared.inbox,
                    &self.shared.tsfn,
                );
            if !inline && self.shared.spare_core {
                completion::poll_for(e, &self.shared.inbox, req);
            }
            Ok(p)
        };
        promise(e, r)
    }

    /// `opSupportLimits()`.
    #[napi]
    pub fn op_support_limits(&self, env: Env) -> napi::Result<JsRaw> {
        Ok(JsRaw(super::limits::op_support_limits(
            env.raw(),
            self.shared.device_type(),
            self.shared.max_tensor_bytes(),
        )?))
    }

    /// Extension: `compute(graph, inputs, outputs)` transfers the caller's
    /// buffers while the worker runs and hands new views back.
    #[napi]
    pub fn compute(
        &self,
        env: Env,
        graph: JsRaw,
        inputs: JsRaw,
        outputs: JsRaw,
    ) -> napi::Result<JsRaw> {
        let e = env.raw();
        let r = || {
            let (g, ins, outs) = self.compute_call(e, graph, inputs, outputs)?;
            let all: Vec<&ComputeArg> = ins.iter().chain(&outs).collect();
            views::check_transferable(e, &all)?;
            // Copied before the buffers are detached; the worker hands
            // these very buffers back for the caller's new input views.
            let bufs = input_bufs(&g.graph, &ins, &self.shared.copy_help)?;
            let in_views = views_back(&g.graph, &ins, &g.graph.inputs);
            let out_views = views_back(&g.graph, &outs, &g.graph.outputs);
            // Everything that can fail before the buffers are detached does:
            // a rejected call leaves the caller's buffers as they were.
            let (req, p) = map_err(shared::register(
                e,
                &self.shared,
                PendingKind::Compute {
                    inputs: in_views,
                    outputs: out_views,
                },
            ))?;
            for a in &all {
                if raw::detach(e, a.info.buffer).is_err() {
                    // A buffer that cannot be detached (a WebAssembly
                    // memory's): N-API cannot tell before trying, so the
                    // buffers before it in the call are detached already.
                    let err = Error::type_error(format!(
                        "compute: the buffer of {:?} cannot be transferred",
                        a.name
                    ));
                    if let Some((d, _)) = shared::take(e, req) {
                        if let Ok(v) = js_error(e, &err) {
                            let _ = raw::reject(e, d, v);
                        }
                    }
                    return Ok(p);
                }
            }
            self.shared.send_or_reject(
                e,
                req,
                Command::Compute {
                    id: g.id,
                    graph: g.graph.clone(),
                    inputs: bufs,
                    hand_back: true,
                    respond: Responder::Js(req),
                },
            );
            Ok(p)
        };
        promise(e, r)
    }

    /// Extension: `computeSync(graph, inputs, outputs)` blocks until the
    /// results are written into `outputs` in place; returns `outputs`.
    #[napi]
    pub fn compute_sync(
        &self,
        env: Env,
        graph: JsRaw,
        inputs: JsRaw,
        outputs: JsRaw,
    ) -> napi::Result<JsRaw> {
        let e = env.raw();
        let r = (|| {
            let (g, ins, outs) = self.compute_call(e, graph, inputs, outputs)?;
            if self.shared.returning.get() > 0 {
                // The worker waits for this thread to deliver a tensor's
                // contents from WebGPU, which needs the event loop.
                return Err(Error::invalid_state(
                    "computeSync: a tensor is on its way back from WebGPU; use compute()",
                ));
            }
            let bufs = input_bufs(&g.graph, &ins, &self.shared.copy_help)?;
            let (tx, rx) = crossbeam_channel::bounded(1);
            self.shared.send(Command::Compute {
                id: g.id,
                graph: g.graph.clone(),
                inputs: bufs,
                hand_back: false,
                respond: Responder::Sync(tx),
            })?;
            let results = match rx.recv() {
                Ok(Ok(Payload::Outputs { outputs, .. })) => outputs,
                Ok(Ok(_)) => return Err(Error::unknown("computeSync: unexpected result")),
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(Error::invalid_state("computeSync: the MLContext was lost")),
            };
            for ((a, buf), (_, op)) in outs.iter().zip(results).zip(&g.graph.outputs) {
                // The buffer's own bytes where they are the external
                // layout (all but the 4-bit types): one copy, into the view.
                let bytes = buf.external_bytes(g.graph.operands[*op].data_type);
                if bytes.len() == a.info.byte_length && !bytes.is_empty() {
                    // SAFETY: `a.info` was read by `compute_args` in this
                    // callback, after the caller's last getter ran, and
                    // since then this thread only waited for the worker:
                    // no JS ran here, and only JS on this thread can
                    // detach, transfer or shrink a buffer this thread
                    // holds (a SharedArrayBuffer can only grow), so
                    // `a.info.data` still has byte_length == bytes.len()
                    // writable bytes. `bytes` is Rust memory (the
                    // buffer's or a packed copy), so the two do not overlap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), a.info.data, bytes.len())
                    };
                }
                buf.recycle();
            }
            Ok(())
        })();
        or_throw(e, r)?;
        Ok(outputs)
    }
}

/// Checks a buffer source against a descriptor ("validate buffer with
/// descriptor") and returns it. `tensor_io`: the source is the data of
/// `writeTensor()` or the destination of `readTensor()`, which also take an
/// `Int8Array` of the tensor's bytes (see [`views::check_tensor_io_fits`]).
fn source_fits(
    env: napi_env,
    v: JsRaw,
    d: &crate::types::OperandDescriptor,
    what: &str,
    tensor_io: bool,
) -> Result<super::convert::BufferSource> {
    let src = buffer_source(env, v.0, what)?;
    match raw::view_info(env, v.0).ok().flatten() {
        Some(info) if tensor_io => views::check_tensor_io_fits(&info, d, what)?,
        Some(info) => views::check_fits(&info, d, what)?,
        None if src.len != d.byte_length() => {
            return Err(Error::type_error(format!(
                "{what} has {} bytes but the tensor has {}",
                src.len,
                d.byte_length()
            )))
        }
        None => {}
    }
    Ok(src)
}

/// Like [`source_fits`], returning a copy of the bytes.
fn check_source(
    env: napi_env,
    v: JsRaw,
    d: &crate::types::OperandDescriptor,
    what: &str,
) -> Result<Vec<u8>> {
    let src = source_fits(env, v, d, what, false)?;
    // SAFETY: `source_fits` just read the source, in this callback, and no
    // JS code has run since; the bytes are copied at once.
    Ok(unsafe { src.bytes() }.to_vec())
}

/// What starts a context: the backend's factory, the label, the pool
/// whose thread runs the timeline (a CPU context with `numThreads`), and
/// the threads that may share the JS thread's large copies.
type ContextPlan = (
    BackendFactory,
    String,
    Option<Arc<rayon::ThreadPool>>,
    HelperPool,
);

/// Reads `MLContextOptions` and picks the backend.
fn context_factory(opts: &Val) -> Result<ContextPlan> {
    let ctx = Ctx::new("createContext");
    if !matches!(opts, Val::Undefined | Val::Null | Val::Dict(_)) {
        return Err(ctx.err("options must be a dictionary"));
    }
    let device = ctx.enum_or(
        opts.member("deviceType"),
        "deviceType",
        &["cpu", "gpu", "npu"],
        "",
    )?;
    let power = ctx
        .enum_or(
            opts.member("powerPreference"),
            "powerPreference",
            &["default", "high-performance", "low-power"],
            "default",
        )?
        .to_string();
    // `accelerated` (#895) defaults to true in the spec, where a browser
    // may then pick any accelerator. A server process does not take a GPU
    // it was not asked for: only an explicit `accelerated: true` (or
    // `deviceType: 'gpu'`, our extension) selects the GPU backend, and an
    // absent member keeps the CPU backend (docs/spec.md).
    let accelerated = ctx.bool_or(opts.member("accelerated"), "accelerated", false)?;
    let label = ctx
        .opt_string(opts.member("label"), "label")?
        .unwrap_or_default();
    let memory_limit = match opts.member("memoryLimit") {
        Val::Undefined => None,
        v => {
            let m = ctx.number(v, "memoryLimit")?;
            if !(m.is_finite() && m >= 0.0 && m.fract() == 0.0) {
                return Err(ctx.err("memoryLimit must be a non-negative integer number of bytes"));
            }
            Some(m as usize)
        }
    };
    let threads = match opts.member("numThreads") {
        Val::Undefined => None,
        v => match ctx.u32(v, "numThreads")? {
            0 => return Err(ctx.err("numThreads must be at least 1")),
            // Clamped to the cores (see `cpu::max_threads`).
            n => Some(n as usize),
        },
    };
    let cpu = move || -> Result<Box<dyn Backend>> {
        Ok(Box::new(
            crate::backend::cpu::CpuBackend::with_threads(threads)?.with_memory_limit(memory_limit),
        ))
    };
    Ok(match device {
        "npu" => return Err(Error::not_supported("createContext: no NPU is available")),
        "gpu" => (
            Box::new(move || crate::backend::gpu::create(&power)),
            label,
            None,
            HelperPool::None,
        ),
        // `accelerated: true` without a device type asks for the GPU where
        // one exists, and settles for the CPU otherwise (then with threads
        // of its own that the timeline is not one of); `deviceType`
        // decides when both are given.
        "" if accelerated => (
            Box::new(move || crate::backend::gpu::create(&power).or_else(|_| cpu())),
            label,
            None,
            HelperPool::None,
        ),
        _ => match threads {
            None => (Box::new(cpu), label, None, HelperPool::Global),
            // The timeline runs on a thread of the kernels' pool.
            Some(n) => {
                let pool = crate::backend::cpu::pool(n)?;
                let kernels = pool.clone();
                let factory: BackendFactory = Box::new(move || {
                    Ok(Box::new(
                        crate::backend::cpu::CpuBackend::with_pool(Some(kernels))
                            .with_memory_limit(memory_limit),
                    ))
                });
                let help = HelperPool::Pool(Arc::downgrade(&pool));
                (factory, label, Some(pool), help)
            }
        },
    })
}

/// `ml.createContext(options)`.
#[napi(js_name = "createContext")]
pub fn create_context(env: Env, options: Option<JsRaw>) -> napi::Result<JsRaw> {
    let e = env.raw();
    promise(e, || {
        let opts = match options {
            Some(o) => to_val(e, o.0)?,
            None => Val::Undefined,
        };
        let (factory, label, host, help) = context_factory(&opts)?;
        start_context(e, factory, label, host, None, help)
    })
}

/// The native half of `ml.createContext(gpuDevice)` (index.js checks the
/// device): a GPU context on the wgpu adapter that `adapter`
/// (`{vendor, device}`, the GPUDevice's `adapterInfo`) names when one
/// matches, else on the default adapter.
#[napi(js_name = "createWebGpuContext")]
pub fn create_webgpu_context(env: Env, adapter: JsRaw) -> napi::Result<JsRaw> {
    let e = env.raw();
    promise(e, || {
        let ctx = Ctx::new("createContext");
        let v = to_val(e, adapter.0)?;
        let text = |name: &str| -> Result<String> {
            Ok(ctx.opt_string(v.member(name), name)?.unwrap_or_default())
        };
        let hint = crate::backend::gpu::AdapterHint {
            vendor: text("vendor")?,
            device: text("device")?,
        };
        let choice = Arc::new(std::sync::Mutex::new(String::new()));
        let slot = choice.clone();
        let factory: BackendFactory = Box::new(move || {
            let (backend, chose) = crate::backend::gpu::create_matching(&hint)?;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = chose;
            Ok(backend)
        });
        start_context(
            e,
            factory,
            text("label")?,
            None,
            Some(choice),
            HelperPool::None,
        )
    })
}

/// Starts a context's worker; returns the promise of the MLContext.
fn start_context(
    e: napi_env,
    factory: BackendFactory,
    label: String,
    host: Option<Arc<rayon::ThreadPool>>,
    webgpu: Option<Arc<std::sync::Mutex<String>>>,
    helpers: HelperPool,
) -> Result<napi_value> {
    let id = NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed);
    let (tsfn, inbox, sink) = map_err(completion::create_sink(e, id))?;
    // Where a CPU context's threads leave this thread a core of its own,
    // its reads copy into memory this thread readies (`Buf::readied`):
    // there the page faults of fresh memory run beside the work. Where
    // they take every core, this thread's faults would take turns with
    // the work and delay it: measured on a 2-vCPU Zen 5, a 196 KB result
    // at two threads, 0.16 against 0.21 ms with readying. The same core
    // lets the event loop poll for a read due soon
    // (`completion::poll_for`); where there is none, polling took it from
    // the work (the same product at two threads, 0.11 ms asleep, 0.17
    // polling).
    let spare_core = host
        .as_ref()
        .is_some_and(|p| p.current_num_threads() < crate::backend::cpu::max_threads());
    let copy_help = CopyHelp {
        pool: helpers,
        desk: Some(inbox.desk.clone()),
    };
    let shared = Rc::new(CtxShared {
        id,
        timeline: RefCell::new(None),
        tsfn,
        inbox,
        pending: Cell::new(0),
        lost: Cell::new(false),
        device_type: Cell::new("cpu"),
        accelerated: Cell::new(false),
        max_tensor_bytes: Cell::new(crate::types::MAX_TENSOR_BYTE_LENGTH),
        next_id: Cell::new(1),
        lost_promise: RefCell::new(None),
        lost_message: RefCell::new(None),
        label,
        webgpu,
        returning: Rc::new(Cell::new(0)),
        copy_help,
        spare_core,
    });
    completion::register_context(e, &shared);
    let (req, p) = map_err(shared::register(e, &shared, PendingKind::Context))?;
    match Timeline::start(
        format!("webnn-context-{}", shared.id),
        host,
        factory,
        Box::new(sink),
        req,
    ) {
        Ok(t) => *shared.timeline.borrow_mut() = Some(t),
        Err(err) => {
            if let Some((d, _)) = shared::take(e, req) {
                map_err(raw::reject(e, d, map_err(js_error(e, &err))?))?;
            }
        }
    }
    Ok(p)
}
