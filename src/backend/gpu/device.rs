//! Choosing and keeping GPU devices: the Vulkan adapter a WebGPU context
//! names ([`AdapterHint`]), opening a device ([`open_device`]), and the
//! pool of devices that outlive their contexts ([`DEVICES`]); also
//! [`block_on`], which drives wgpu's native futures.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use crate::error::{Error, Result};

/// The WebGPU adapter a context was created for: `GPUAdapterInfo`'s
/// `vendor` and `device` of the `GPUDevice` given to `createContext()`.
#[derive(Debug, Clone, Default)]
pub struct AdapterHint {
    pub vendor: String,
    pub device: String,
}

impl AdapterHint {
    /// Whether `info` is this adapter. WebGPU names the vendor (`"nvidia"`,
    /// or a PCI id in hex) where Vulkan numbers it, and the device either by
    /// id or by its name reduced to lowercase words joined by hyphens
    /// (Dawn: `"llvmpipe-llvm-15-0-6-256-bits-"` for Vulkan's
    /// `"llvmpipe (LLVM 15.0.6, 256 bits)"`); an empty device (browsers
    /// may hide it) leaves the vendor to decide.
    pub(super) fn matches(&self, info: &wgpu::AdapterInfo) -> bool {
        let vendor = self.vendor.trim().to_ascii_lowercase();
        let vendor_ok =
            parse_id(&vendor) == Some(info.vendor) || vendor_ids(&vendor).contains(&info.vendor);
        let device = self.device.trim();
        let device_ok = device.is_empty()
            || parse_id(device) == Some(info.device)
            || (!slug(device).is_empty() && slug(device) == slug(&info.name));
        vendor_ok && device_ok
    }
}

/// The PCI (or Khronos) vendor ids of a WebGPU vendor name.
fn vendor_ids(name: &str) -> &'static [u32] {
    match name {
        "nvidia" => &[0x10de],
        "amd" | "ati" => &[0x1002, 0x1022],
        "intel" => &[0x8086],
        "apple" => &[0x106b],
        "arm" => &[0x13b5],
        "qualcomm" => &[0x5143],
        "imagination" | "img-tec" => &[0x1010],
        "microsoft" => &[0x1414],
        "samsung" => &[0x144d],
        "broadcom" => &[0x14e4],
        "google" => &[0x1ae0],
        // VK_VENDOR_ID_MESA: lavapipe and other Mesa software devices.
        "mesa" => &[0x10005],
        _ => &[],
    }
}

/// An id written as `0x10de` or `4318`.
fn parse_id(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        None => None,
    }
}

/// Lowercase letters and digits, each other run of characters one hyphen,
/// none at either end.
fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// Which Vulkan adapter a pooled device was opened on, when it was chosen
/// by an [`AdapterHint`] rather than by power preference.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AdapterKey {
    name: String,
    vendor: u32,
    device: u32,
}

impl AdapterKey {
    fn of(info: &wgpu::AdapterInfo) -> AdapterKey {
        AdapterKey {
            name: info.name.clone(),
            vendor: info.vendor,
            device: info.device,
        }
    }
}

/// Wakes the thread that runs [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives a future to completion on this thread. wgpu's native futures
/// (adapter and device requests, error scopes) are ready at once or soon
/// after; the timed park guards against a future that completes without
/// waking anyone.
pub(super) fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

/// An opened GPU: what [`DEVICES`] keeps between contexts.
pub(super) struct OpenDevice {
    pub(super) power_preference: wgpu::PowerPreference,
    /// Set when an [`AdapterHint`] chose the adapter: only contexts for
    /// that adapter take the device back.
    pub(super) matched: Option<AdapterKey>,
    pub(super) adapter: String,
    pub(super) accelerated: bool,
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
}

/// Devices of destroyed contexts, reused by later ones and never destroyed.
/// NVIDIA's Vulkan driver (580, H100) crashes the process in the teardown
/// of a device (a destroyed context, or the exit hook's release of a live
/// one), while a device still open at exit is harmless; reusing also
/// saves the seconds that opening a device takes.
pub(super) static DEVICES: Mutex<Vec<OpenDevice>> = Mutex::new(Vec::new());

/// The platform's native GPU APIs, the ones wgpu is built with (Cargo.toml):
/// Metal on Apple platforms, DX12 and Vulkan on Windows, Vulkan elsewhere.
#[cfg(target_vendor = "apple")]
const NATIVE_BACKENDS: wgpu::Backends = wgpu::Backends::METAL;
#[cfg(windows)]
const NATIVE_BACKENDS: wgpu::Backends = wgpu::Backends::DX12.union(wgpu::Backends::VULKAN);
#[cfg(not(any(target_vendor = "apple", windows)))]
const NATIVE_BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN;

/// Opens a device for `power_preference`, or on the adapter that `hint`
/// matches when one does, or takes back a pooled one.
pub(super) fn open_device(
    power_preference: wgpu::PowerPreference,
    hint: Option<&AdapterHint>,
) -> Result<OpenDevice> {
    let instance = || {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = NATIVE_BACKENDS;
        wgpu::Instance::new(desc)
    };
    // Only a hint needs the adapters listed before the pool is asked.
    let hinted = hint.map(|h| {
        let instance = instance();
        let found = block_on(instance.enumerate_adapters(NATIVE_BACKENDS))
            .into_iter()
            .find(|a| h.matches(&a.get_info()));
        (instance, found)
    });
    let matched = hinted
        .as_ref()
        .and_then(|(_, a)| a.as_ref())
        .map(|a| AdapterKey::of(&a.get_info()));
    {
        let mut pool = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = pool
            .iter()
            .position(|d| d.power_preference == power_preference && d.matched == matched)
        {
            return Ok(pool.swap_remove(i));
        }
    }
    let adapter = match hinted {
        Some((_, Some(adapter))) => adapter,
        other => {
            let instance = other.map(|(i, _)| i).unwrap_or_else(instance);
            block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference,
                ..Default::default()
            }))
            .map_err(|e| Error::not_supported(format!("no GPU adapter is available ({e})")))?
        }
    };
    let info = adapter.get_info();
    // The adapter's own limits: WebNN tensors easily exceed WebGPU's
    // conservative defaults (128 MiB storage bindings).
    let limits = adapter.limits();
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("webnn"),
        required_limits: limits,
        ..Default::default()
    }))
    .map_err(|e| Error::not_supported(format!("cannot open the GPU {:?}: {e}", info.name)))?;
    Ok(OpenDevice {
        power_preference,
        matched,
        adapter: info.name.clone(),
        accelerated: info.device_type != wgpu::DeviceType::Cpu,
        device,
        queue,
    })
}
