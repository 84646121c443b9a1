//! `MLGraphBuilder` and `MLOperand`.
//!
//! Every operator method funnels into one native entry point that converts
//! the JS arguments to [`Val`]s and calls the pure-Rust registry in
//! `graph::ops`; index.js names one prototype method per operator.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use napi::bindgen_prelude::{ClassInstance, FromNapiValue, JavaScriptClassExt};
use napi::sys::{napi_env, napi_value};
use napi::{Env, ValueType};
use napi_derive::napi;

use super::convert::{buffer_source, to_val, to_val_within};
use super::errors::{from_napi, or_throw, promise, throw};
use super::operand::MLOperand;
use super::raw::{self, JsRaw};
use super::shared::{CtxShared, MLContext};
use super::tensor::MLTensor;
use crate::error::{Error, Result};
use crate::graph::args::{descriptor, Ctx};
use crate::graph::{GraphBuilder, OperandId};
use crate::timeline::Command;
use crate::types::OperandDescriptor;

/// The most arguments an operator method reads (lstmCell's seven).
const MAX_ARGS: u32 = 8;

/// `MLGraphBuilder`.
#[napi(js_name = "MLGraphBuilder")]
pub struct MLGraphBuilder {
    ctx: Rc<CtxShared>,
    builder: GraphBuilder,
    /// Constants made from tensors, with the tensors' destroyed flags.
    tensor_constants: Vec<(OperandId, Rc<Cell<bool>>)>,
}

impl MLGraphBuilder {
    fn check(&self) -> Result<()> {
        if self.ctx.is_lost() {
            return Err(Error::invalid_state(
                "the MLContext of this builder is lost",
            ));
        }
        Ok(())
    }

    fn operand(&self, env: &Env, id: OperandId) -> napi::Result<napi_value> {
        let op = MLOperand {
            builder: self.builder.id,
            id,
            desc: self.builder.desc(id).clone(),
            origin: self.builder.origin(id),
        };
        Ok(op.into_instance(env)?.value)
    }

    fn constant_impl(&mut self, env: napi_env, a: JsRaw, b: JsRaw) -> Result<OperandId> {
        self.check()?;
        let ctx = Ctx::new("constant");
        // constant(tensor)
        // SAFETY: the current callback's env and an argument handle (raw.rs's
        // rules). `from_napi_value` unwraps only an object napi-rs wrapped
        // as an MLTensor (it checks the type tag and the class), else an
        // error; the argument keeps the object, and so the native value,
        // alive for this callback, which `t` does not outlive; MLTensor has
        // no `&mut self` method, so this shared access aliases no mutable
        // borrow.
        if let Ok(t) = unsafe { ClassInstance::<MLTensor>::from_napi_value(env, a.0) } {
            t.check_usable(&self.ctx, "the constant's MLTensor")?;
            let data =
                t.info.constant.clone().ok_or_else(|| {
                    ctx.err("the MLTensor was not created by createConstantTensor()")
                })?;
            let id = self.builder.constant(t.info.desc.clone(), data)?;
            self.tensor_constants.push((id, t.destroyed.clone()));
            return Ok(id);
        }
        // constant(type, value)
        if raw::type_of(env, a.0).ok() == Some(ValueType::String) {
            let dt = ctx.data_type(&to_val(env, a.0)?, "type")?;
            let value = ctx.ml_number(&to_val(env, b.0)?, "value")?;
            let bytes = crate::graph::args::scalar_bytes(dt, value);
            return self
                .builder
                .constant(OperandDescriptor::new(dt, vec![])?, Arc::new(bytes));
        }
        // constant(descriptor, buffer)
        let desc = descriptor(&ctx, &to_val(env, a.0)?)?;
        let src = buffer_source(env, b.0, "constant: buffer")?;
        let info = raw::view_info(env, b.0).ok().flatten();
        if let Some(info) = &info {
            super::views::check_fits(info, &desc, "constant: buffer")?;
        } else if src.len != desc.byte_length() {
            return Err(ctx.err(format!(
                "the buffer has {} bytes but the descriptor needs {}",
                src.len,
                desc.byte_length()
            )));
        }
        // SAFETY: `buffer_source` read `b` after the descriptor (whose
        // conversion runs the caller's getters), and no JS has run since,
        // so it describes live, unchanged memory; copied at once.
        let bytes = unsafe { src.bytes() }.to_vec();
        self.builder.constant(desc, Arc::new(bytes))
    }
}

#[napi]
impl MLGraphBuilder {
    #[napi(constructor)]
    pub fn new(env: Env, context: JsRaw) -> napi::Result<Self> {
        // SAFETY: as for the MLTensor of `constant_impl`, for an MLContext
        // (no `&mut self` method either); only its shared state is cloned
        // out of it.
        let ctx = match unsafe { ClassInstance::<MLContext>::from_napi_value(env.raw(), context.0) }
        {
            Ok(c) => c.shared(),
            Err(_) => {
                return Err(throw(
                    env.raw(),
                    Error::type_error("MLGraphBuilder: the argument must be an MLContext"),
                ))
            }
        };
        if ctx.is_lost() {
            return Err(throw(
                env.raw(),
                Error::invalid_state("MLGraphBuilder: the MLContext is lost"),
            ));
        }
        Ok(MLGraphBuilder {
            ctx,
            builder: GraphBuilder::new(),
            tensor_constants: Vec::new(),
        })
    }

    /// `input(name, descriptor)`.
    #[napi]
    pub fn input(&mut self, env: Env, name: JsRaw, desc: JsRaw) -> napi::Result<JsRaw> {
        let r = (|| {
            self.check()?;
            let ctx = Ctx::new("input");
            let name = ctx.string(&to_val(env.raw(), name.0)?, "name")?.to_string();
            let desc = descriptor(&ctx, &to_val(env.raw(), desc.0)?)?;
            self.ctx.check_size(&desc, "input")?;
            self.builder.input(&name, desc)
        })();
        let id = or_throw(env.raw(), r)?;
        Ok(JsRaw(self.operand(&env, id)?))
    }

    /// `constant(descriptor, buffer)`, `constant(type, value)`,
    /// `constant(tensor)`.
    #[napi]
    pub fn constant(&mut self, env: Env, a: JsRaw, b: JsRaw) -> napi::Result<JsRaw> {
        let r = self.constant_impl(env.raw(), a, b);
        let id = or_throw(env.raw(), r)?;
        Ok(JsRaw(self.operand(&env, id)?))
    }

    /// The one entry point of every operator method (see index.js).
    #[napi(js_name = "_op")]
    pub fn op(&mut self, env: Env, name: String, args: JsRaw) -> napi::Result<JsRaw> {
        let r = (|| {
            self.check()?;
            let e = env.raw();
            // WebIDL ignores arguments beyond an operation's own; none has
            // more than seven.
            let n = raw::array_length(e, args.0)
                .map_err(from_napi)?
                .min(MAX_ARGS);
            let args: Vec<napi_value> = (0..n)
                .map(|i| raw::element(e, args.0, i).map_err(from_napi))
                .collect::<Result<_>>()?;
            // A list of numbers is indexed by dimension (at most the largest
            // rank long) or, for split's sizes, by the elements of one
            // dimension of an operand argument: never longer than both.
            let longest_dim = args
                .iter()
                .filter_map(|&v| {
                    // SAFETY: as for the MLTensor of `constant_impl`, for
                    // an MLOperand (no `&mut self` method); `args` are
                    // handles of this callback.
                    unsafe { ClassInstance::<MLOperand>::from_napi_value(e, v) }.ok()
                })
                .filter(|op| op.builder == self.builder.id)
                .flat_map(|op| op.desc.shape.iter().copied().max())
                .max()
                .unwrap_or(0);
            let max_list = longest_dim.max(super::convert::MAX_LIST);
            let vals = args
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    to_val_within(e, v, max_list).map_err(|err| {
                        Error::new(
                            err.kind,
                            format!("{name}: argument {}: {}", i + 1, err.message),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            self.builder.call(&name, &vals)
        })();
        let ids = or_throw(env.raw(), r)?;
        if crate::graph::ops::returns_sequence(&name) {
            let items = ids
                .iter()
                .map(|&id| self.operand(&env, id))
                .collect::<napi::Result<Vec<_>>>()?;
            Ok(JsRaw(raw::array(env.raw(), &items)?))
        } else {
            Ok(JsRaw(self.operand(&env, ids[0])?))
        }
    }

    /// `build(outputs)`: resolves with an MLGraph once the backend has
    /// compiled it.
    #[napi]
    pub fn build(
        &mut self,
        env: Env,
        outputs: JsRaw,
        options: Option<JsRaw>,
    ) -> napi::Result<JsRaw> {
        let e = env.raw();
        let r = || {
            // The arguments are converted (the caller's getters run) before
            // anything is checked, as WebIDL orders it.
            if raw::type_of(e, outputs.0).ok() != Some(ValueType::Object) {
                return Err(Error::type_error(
                    "build: outputs must be a record of MLOperands",
                ));
            }
            let mut named = Vec::new();
            for key in raw::keys(e, outputs.0, true).map_err(from_napi)? {
                let v = raw::get(e, outputs.0, &key).map_err(from_napi)?;
                named.push((key, to_val(e, v)?));
            }
            let label = super::context::label_of(e, options, "build")?;
            if self.ctx.is_lost() {
                return Err(Error::invalid_state("build: the MLContext is lost"));
            }
            if self.builder.is_built() {
                return Err(Error::invalid_state(
                    "build: this MLGraphBuilder has already built a graph",
                ));
            }
            let ctx = Ctx::new("build");
            let named = named
                .into_iter()
                .map(|(key, v)| {
                    let id = self
                        .builder
                        .operand(&ctx, &v, &format!("outputs[{key:?}]"))?;
                    Ok((key, id))
                })
                .collect::<Result<Vec<_>>>()?;
            let graph = self.builder.build(named)?;
            // A constant whose MLTensor was destroyed before build() has
            // no data to build with.
            for (id, destroyed) in &self.tensor_constants {
                if destroyed.get() && graph.nodes.iter().any(|n| n.inputs.contains(id)) {
                    return Err(Error::type_error(
                        "build: a constant's MLTensor was destroyed before build()",
                    ));
                }
            }
            let graph = Arc::new(graph);
            let id = self.ctx.next_id();
            let (req, p) = super::shared::register(
                e,
                &self.ctx,
                super::shared::PendingKind::Graph {
                    id,
                    graph: graph.clone(),
                },
            )
            .map_err(from_napi)?;
            self.ctx.send_or_reject(
                e,
                req,
                Command::Build {
                    id,
                    graph,
                    label,
                    respond: crate::timeline::Responder::Js(req),
                },
            );
            Ok(p)
        };
        promise(e, r)
    }
}

/// The names of every operator method, for index.js to define them.
#[napi(js_name = "operatorNames")]
pub fn operator_names(env: Env) -> Vec<&'static str> {
    // index.js calls this as it loads: the moment to keep the intrinsics
    // that must not be taken from a global object the caller may change.
    raw::capture_intrinsics(env.raw());
    super::completion::hook_teardown(env.raw());
    crate::graph::ops::all().map(|d| d.name).collect()
}
