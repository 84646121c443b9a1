//! Element storage for tensors on the CPU side of the API.
//!
//! A [`Buf`] holds the elements of one tensor in a typed `Vec`. Every data
//! type is stored one element per slot, except that int4 and uint4 are
//! unpacked into `i8`/`u8` slots: kernels then never deal with nibbles, and
//! packing happens only at the JS boundary ([`Buf::from_bytes`],
//! [`Buf::to_bytes`]).

use crate::copy::CopyHelp;
use crate::error::{Error, Result};
use crate::f16::f16_to_f32;
use crate::types::DataType;

/// Typed element storage. The variant is fixed by the data type
/// ([`Buf::zeros`]); int4 uses `I8`, uint4 uses `U8`.
#[derive(Debug, Clone, PartialEq)]
pub enum Buf {
    F32(Vec<f32>),
    /// float16 bit patterns.
    F16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    I8(Vec<i8>),
    U8(Vec<u8>),
}

/// Runs `$body` with `$v` bound to the inner `Vec` of any variant.
#[macro_export]
macro_rules! with_buf {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            $crate::tensor::Buf::F32($v) => $body,
            $crate::tensor::Buf::F16($v) => $body,
            $crate::tensor::Buf::I32($v) => $body,
            $crate::tensor::Buf::U32($v) => $body,
            $crate::tensor::Buf::I64($v) => $body,
            $crate::tensor::Buf::U64($v) => $body,
            $crate::tensor::Buf::I8($v) => $body,
            $crate::tensor::Buf::U8($v) => $body,
        }
    };
}

/// Element types whose all-zero bit pattern is the value zero.
trait ZeroBits: Copy {}
impl ZeroBits for f32 {}
impl ZeroBits for u16 {}
impl ZeroBits for i32 {}
impl ZeroBits for u32 {}
impl ZeroBits for i64 {}
impl ZeroBits for u64 {}
impl ZeroBits for i8 {}
impl ZeroBits for u8 {}

/// `n` zeros from the allocator's zeroed memory, or an error when there is
/// not that much: a large allocation comes as fresh pages that the system
/// zero-fills on first touch, so a huge tensor is created in constant time
/// and costs memory only where it is written.
fn try_zeroed<T: ZeroBits>(n: usize) -> Result<Vec<T>> {
    let err = || {
        Error::operation(format!(
            "cannot allocate {} bytes for a tensor",
            (n as u128) * std::mem::size_of::<T>() as u128
        ))
    };
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| err())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: `alloc_zeroed` needs a layout of non-zero size (checked
    // above). On success `p` is an allocation of the global allocator with
    // `Layout::array::<T>(n)`, the layout `Vec<T>` frees a capacity of `n`
    // with, aligned for T; all-zero bits are a valid value of every
    // `ZeroBits` type (plain integers and floats), so its `n` elements are
    // initialised; the vector takes sole ownership of it.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        if p.is_null() {
            return Err(err());
        }
        Ok(Vec::from_raw_parts(p, n, n))
    }
}

impl Buf {
    /// An empty buffer of the variant that stores `dt`.
    pub fn empty(dt: DataType) -> Buf {
        match dt {
            DataType::Float32 => Buf::F32(Vec::new()),
            DataType::Float16 => Buf::F16(Vec::new()),
            DataType::Int32 => Buf::I32(Vec::new()),
            DataType::Uint32 => Buf::U32(Vec::new()),
            DataType::Int64 => Buf::I64(Vec::new()),
            DataType::Uint64 => Buf::U64(Vec::new()),
            DataType::Int8 | DataType::Int4 => Buf::I8(Vec::new()),
            DataType::Uint8 | DataType::Uint4 => Buf::U8(Vec::new()),
        }
    }

    /// Hands a buffer that is no longer needed to the recycling pool.
    pub fn recycle(self) {
        pool::give(self)
    }

    /// Whether [`Buf::recycle`] would keep this buffer for a later
    /// allocation (it is large enough for the pool) rather than free it.
    pub fn recyclable(&self) -> bool {
        pool::keeps(self)
    }

    /// Hands a shared buffer to the recycling pool if this was the last
    /// hold on it; a holder left (a tensor, a read in flight) keeps it,
    /// and recycles it in turn when it lets go.
    pub fn recycle_shared(data: std::sync::Arc<Buf>) {
        if let Ok(b) = std::sync::Arc::try_unwrap(data) {
            pool::give_contents(b);
        }
    }

    /// A recycled buffer of the same variant as `kind` with `n` elements
    /// (old contents), when the pool has one.
    pub fn recycled(kind: &Buf, n: usize) -> Option<Buf> {
        pool::take(kind, n)
    }

    /// A copy of this buffer, in recycled memory when some is free.
    pub fn pooled_clone(&self) -> Buf {
        match pool::take(self, self.len()) {
            Some(mut b) => {
                // `take` returns the variant of `self` with its length.
                macro_rules! copy {
                    ($($v:ident),*) => {
                        match (&mut b, self) {
                            $((Buf::$v(d), Buf::$v(s)) => d.copy_from_slice(s),)*
                            _ => return self.clone(),
                        }
                    };
                }
                copy!(F32, F16, I32, U32, I64, U64, I8, U8);
                b
            }
            None => self.clone(),
        }
    }

    /// A copy of this buffer, in recycled memory when some is free, made
    /// with the help of `help`'s threads when it is large (see
    /// [`crate::copy`]); an OperationError when fresh memory cannot be
    /// had.
    pub fn helped_clone(&self, help: &CopyHelp) -> Result<Buf> {
        // The elements' own bytes, read back as the plain type of this
        // variant (int4 and uint4 are unpacked bytes here, not nibbles).
        let plain = match self {
            Buf::F32(_) => DataType::Float32,
            Buf::F16(_) => DataType::Float16,
            Buf::I32(_) => DataType::Int32,
            Buf::U32(_) => DataType::Uint32,
            Buf::I64(_) => DataType::Int64,
            Buf::U64(_) => DataType::Uint64,
            Buf::I8(_) => DataType::Int8,
            Buf::U8(_) => DataType::Uint8,
        };
        Buf::from_bytes_helped(plain, self.raw_bytes(), self.len(), help)
    }

    /// A vector of `n` floats for a kernel that writes every element:
    /// recycled memory when the pool has a float32 buffer of that length
    /// (its old contents, which the caller overwrites), else fresh zeros.
    /// Saves the zero-fill and, for large buffers, the page faults of new
    /// memory on every run.
    pub fn f32_for_overwrite(n: usize) -> Vec<f32> {
        match pool::take(&Buf::F32(Vec::new()), n) {
            Some(Buf::F32(v)) => v,
            _ => vec![0.0; n],
        }
    }

    /// [`Buf::f32_for_overwrite`] whose fresh allocation fails with an
    /// OperationError naming the bytes instead of aborting.
    pub fn try_f32_for_overwrite(n: usize) -> Result<Vec<f32>> {
        match pool::take(&Buf::F32(Vec::new()), n) {
            Some(Buf::F32(v)) => Ok(v),
            _ => try_zeroed(n),
        }
    }

    /// An empty vector with room for `n` elements of `U`: a recycled
    /// buffer's memory when `U` is a tensor element type and the pool has
    /// one of that length, else a fresh allocation. For kernels that write
    /// every element: recycled memory skips the page faults (and kernel
    /// zeroing) that fresh large allocations pay on first touch.
    pub fn vec_for_overwrite<U: Copy + 'static>(n: usize) -> Vec<U> {
        Self::try_vec_for_overwrite(n).unwrap_or_else(|_| Vec::with_capacity(n))
    }

    /// [`Buf::vec_for_overwrite`] whose fresh allocation fails with an
    /// OperationError naming the bytes instead of aborting.
    pub fn try_vec_for_overwrite<U: Copy + 'static>(n: usize) -> Result<Vec<U>> {
        use std::any::Any;
        fn fresh<U>(n: usize) -> Result<Vec<U>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| {
                Error::operation(format!(
                    "cannot allocate {} bytes for a tensor",
                    (n as u128) * std::mem::size_of::<U>() as u128
                ))
            })?;
            Ok(v)
        }
        fn take<T: 'static, U: 'static>(
            kind: Buf,
            n: usize,
            unwrap: fn(Buf) -> Vec<T>,
        ) -> Option<Vec<U>> {
            let mut v = Some(unwrap(pool::take_room(&kind, n)?));
            (&mut v as &mut dyn Any)
                .downcast_mut::<Option<Vec<U>>>()?
                .take()
        }
        macro_rules! try_variants {
            ($($t:ty => $variant:ident),*) => {$(
                if std::any::TypeId::of::<U>() == std::any::TypeId::of::<$t>() {
                    let unwrap: fn(Buf) -> Vec<$t> = |b| match b {
                        Buf::$variant(v) => v,
                        _ => Vec::new(),
                    };
                    if let Some(v) = take::<$t, U>(Buf::$variant(Vec::new()), n, unwrap) {
                        return Ok(v);
                    }
                    return fresh(n);
                }
            )*};
        }
        try_variants!(f32 => F32, u16 => F16, i32 => I32, u32 => U32, i64 => I64, u64 => U64, i8 => I8, u8 => U8);
        fresh(n)
    }

    /// A zero-filled buffer of `n` elements, or an OperationError when the
    /// memory cannot be had (never an abort).
    pub fn zeros(dt: DataType, n: usize) -> Result<Buf> {
        if let Some(mut b) = pool::take(&Buf::empty(dt), n) {
            with_buf!(&mut b, v => v.iter_mut().for_each(|x| *x = Default::default()));
            return Ok(b);
        }
        Buf::fresh_zeros(dt, n)
    }

    /// `n` zeros of `dt` in fresh memory (lazily mapped: see
    /// [`try_zeroed`]).
    fn fresh_zeros(dt: DataType, n: usize) -> Result<Buf> {
        Ok(match dt {
            DataType::Float32 => Buf::F32(try_zeroed(n)?),
            DataType::Float16 => Buf::F16(try_zeroed(n)?),
            DataType::Int32 => Buf::I32(try_zeroed(n)?),
            DataType::Uint32 => Buf::U32(try_zeroed(n)?),
            DataType::Int64 => Buf::I64(try_zeroed(n)?),
            DataType::Uint64 => Buf::U64(try_zeroed(n)?),
            DataType::Int8 | DataType::Int4 => Buf::I8(try_zeroed(n)?),
            DataType::Uint8 | DataType::Uint4 => Buf::U8(try_zeroed(n)?),
        })
    }

    /// Memory for a copy of `n` elements of `dt` that is to be made
    /// later (a read's result, see `Command::ReadTensor`), readied now:
    /// a recycled buffer where the pool can spare one, else fresh memory
    /// written through once, so that its pages are in place before the
    /// copy. A result handed to JavaScript comes back to the pool only
    /// when V8 collects it, so until then each read of a large result
    /// takes fresh memory, and the first write to a fresh page costs a
    /// page fault: measured on a 2-vCPU Zen 5 VM, about 75 us to fault
    /// in 250 KB (1.2 us a 4 KiB page), against under 2 us to write it
    /// again once in place. The reader readies it while the work before
    /// the read still runs, off the path of the result.
    ///
    /// `None` for a result the pool would not keep (smaller than its
    /// smallest, larger than what it may hold), for int4 and uint4 (whose
    /// results JS gets packed, a copy of their own), and where memory
    /// cannot be had (the read then
    /// allocates as before, and fails as before if it must).
    pub fn readied(dt: DataType, n: usize) -> Option<Buf> {
        let kind = match dt {
            // Packed to half a byte each for JS: copied again anyway.
            DataType::Int4 | DataType::Uint4 => return None,
            _ => Buf::empty(dt),
        };
        let bytes = dt.byte_length(n);
        if !pool::would_keep(bytes) {
            return None;
        }
        if let Some(b) = pool::take_spare(&kind, n) {
            return Some(b);
        }
        // Not from the pool: what `take_spare` left is for the run.
        let mut b = Buf::fresh_zeros(dt, n).ok()?;
        // Fresh zeros are mapped lazily: writing them faults the pages in.
        with_buf!(&mut b, v => v.fill(Default::default()));
        Some(b)
    }

    /// Copies `src` into this buffer, readied by [`Buf::readied`] for it,
    /// a large copy with the help of `help`'s threads: false (and nothing
    /// copied) where the two differ in type or length.
    pub fn copy_from(&mut self, src: &Buf, help: &CopyHelp) -> bool {
        if std::mem::discriminant(self) != std::mem::discriminant(src) || self.len() != src.len() {
            return false;
        }
        let (from, to) = (src.raw_bytes(), self.raw_bytes_mut());
        // SAFETY: `to` is borrowed mutably and `from` shared for the whole
        // call, so they do not overlap and neither changes meanwhile; both
        // are `len` bytes (the same variant and element count).
        unsafe {
            crate::copy::copy_nonoverlapping(from.as_ptr(), to.as_mut_ptr(), from.len(), help)
        };
        true
    }

    pub fn len(&self) -> usize {
        with_buf!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `bytes` hold `n` elements of `dt`: the one condition
    /// [`Buf::from_bytes`] puts on them (every bit pattern is a value of
    /// every type), checked without a copy.
    pub fn check_bytes(dt: DataType, bytes: &[u8], n: usize) -> Result<()> {
        let need = n.checked_mul(dt.bits()).map(|bits| bits.div_ceil(8));
        if need.is_none_or(|need| bytes.len() < need) {
            return Err(Error::type_error(format!(
                "{} bytes are too few for {n} {} elements",
                bytes.len(),
                dt.name()
            )));
        }
        Ok(())
    }

    /// Reads `n` elements of type `dt` from the external byte layout
    /// (little-endian, int4/uint4 packed low nibble first). `bytes` may be
    /// unaligned.
    pub fn from_bytes(dt: DataType, bytes: &[u8], n: usize) -> Result<Buf> {
        Buf::from_bytes_helped(dt, bytes, n, &CopyHelp::default())
    }

    /// [`Buf::from_bytes`] with a large copy shared with `help`'s threads
    /// (see [`crate::copy`]).
    pub fn from_bytes_helped(dt: DataType, bytes: &[u8], n: usize, help: &CopyHelp) -> Result<Buf> {
        // Checked: the copies below trust this bound, and a wrapped
        // product would pass a short `bytes`.
        Buf::check_bytes(dt, bytes, n)?;
        // The external layout is the in-memory one (little-endian, plain
        // old data), so one bulk copy fills the vector; the source may be
        // unaligned, which a byte copy does not mind.
        macro_rules! read {
            ($t:ty, $variant:ident) => {{
                let len = n * std::mem::size_of::<$t>();
                let mut v: Vec<$t> = match pool::take_room(&Buf::$variant(Vec::new()), n) {
                    Some(Buf::$variant(v)) => v,
                    _ => Vec::new(),
                };
                v.try_reserve_exact(n)
                    .map_err(|_| Error::operation(format!("cannot allocate {n} elements")))?;
                // SAFETY: after `try_reserve_exact(n)` the capacity holds at
                // least n elements, len = n * size_of::<$t>() bytes, and
                // `bytes` has at least that many (`need`, checked above
                // without overflow); it is a shared borrow for the whole
                // call, so it neither overlaps the vector's own memory nor
                // changes before the copy returns; a byte copy needs no
                // alignment of the source; every bit pattern is a valid $t
                // (a plain integer or float), so the first n elements are
                // initialised before `set_len(n)`.
                unsafe {
                    crate::copy::copy_nonoverlapping(
                        bytes.as_ptr(),
                        v.as_mut_ptr().cast::<u8>(),
                        len,
                        help,
                    );
                    v.set_len(n);
                }
                Buf::$variant(v)
            }};
        }
        Ok(match dt {
            DataType::Float32 => read!(f32, F32),
            DataType::Float16 => read!(u16, F16),
            DataType::Int32 => read!(i32, I32),
            DataType::Uint32 => read!(u32, U32),
            DataType::Int64 => read!(i64, I64),
            DataType::Uint64 => read!(u64, U64),
            DataType::Int8 => Buf::I8(bytes[..n].iter().map(|&b| b as i8).collect()),
            DataType::Uint8 => Buf::U8(bytes[..n].to_vec()),
            DataType::Int4 => Buf::I8(
                (0..n)
                    .map(|i| {
                        let nib = (bytes[i / 2] >> ((i % 2) * 4)) & 0xf;
                        ((nib << 4) as i8) >> 4
                    })
                    .collect(),
            ),
            DataType::Uint4 => Buf::U8(
                (0..n)
                    .map(|i| (bytes[i / 2] >> ((i % 2) * 4)) & 0xf)
                    .collect(),
            ),
        })
    }

    /// The elements as external bytes (see [`Buf::from_bytes`]).
    pub fn to_bytes(&self, dt: DataType) -> Vec<u8> {
        self.external_bytes(dt).into_owned()
    }

    /// [`Buf::to_bytes`] without a copy where the buffer's own bytes are
    /// the external layout (every type but int4/uint4, which are packed).
    pub fn external_bytes(&self, dt: DataType) -> std::borrow::Cow<'_, [u8]> {
        match (dt, self) {
            (DataType::Int4, Buf::I8(v)) => pack_nibbles(v.iter().map(|&x| x as u8)).into(),
            (DataType::Uint4, Buf::U8(v)) => pack_nibbles(v.iter().copied()).into(),
            _ => self.raw_bytes().into(),
        }
    }

    /// The in-memory bytes of the elements, to write (see [`Buf::raw_bytes`]).
    pub fn raw_bytes_mut(&mut self) -> &mut [u8] {
        with_buf!(self, v => bytemuck::cast_slice_mut(v.as_mut_slice()))
    }

    /// The in-memory bytes of the elements (equal to the external layout for
    /// every type but int4/uint4, on little-endian machines).
    pub fn raw_bytes(&self) -> &[u8] {
        // Every element type is a plain integer or float (Pod).
        with_buf!(self, v => bytemuck::cast_slice(v.as_slice()))
    }

    /// Element `i` as f64 (for tests, reductions of small tensors and
    /// constant folding; not for hot loops).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            Buf::F32(v) => v[i] as f64,
            Buf::F16(v) => f16_to_f32(v[i]) as f64,
            Buf::I32(v) => v[i] as f64,
            Buf::U32(v) => v[i] as f64,
            Buf::I64(v) => v[i] as f64,
            Buf::U64(v) => v[i] as f64,
            Buf::I8(v) => v[i] as f64,
            Buf::U8(v) => v[i] as f64,
        }
    }

    /// All elements as f32 (float16 widened); integers converted.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self {
            Buf::F32(v) => v.clone(),
            Buf::F16(v) => {
                let mut out = vec![0.0; v.len()];
                crate::f16::widen(v, &mut out);
                out
            }
            _ => (0..self.len()).map(|i| self.get_f64(i) as f32).collect(),
        }
    }

    /// [`Buf::to_f32_vec`] in recycled memory when the pool has some, and
    /// whose fresh allocation fails with an OperationError naming the bytes
    /// instead of aborting: for the CPU backend's worker.
    pub fn try_to_f32_vec(&self) -> Result<Vec<f32>> {
        let mut out = Self::try_f32_for_overwrite(self.len())?;
        match self {
            Buf::F32(v) => out.copy_from_slice(v),
            Buf::F16(v) => crate::f16::widen(v, &mut out),
            _ => out
                .iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = self.get_f64(i) as f32),
        }
        Ok(out)
    }

    /// Element `i` as i64 (integer tensors; floats truncate).
    pub fn get_i64(&self, i: usize) -> i64 {
        match self {
            Buf::I64(v) => v[i],
            Buf::U64(v) => v[i] as i64,
            Buf::I32(v) => v[i] as i64,
            Buf::U32(v) => v[i] as i64,
            Buf::I8(v) => v[i] as i64,
            Buf::U8(v) => v[i] as i64,
            Buf::F32(v) => v[i] as i64,
            Buf::F16(v) => f16_to_f32(v[i]) as i64,
        }
    }

    /// A float16 buffer from f32 values, rounding each once.
    pub fn f16_from_f32(v: &[f32]) -> Buf {
        let mut out = vec![0u16; v.len()];
        crate::f16::narrow(v, &mut out);
        Buf::F16(out)
    }

    /// [`Buf::f16_from_f32`] in recycled memory when the pool has some, and
    /// whose fresh allocation fails with an OperationError naming the bytes
    /// instead of aborting: for the CPU backend's worker.
    pub fn try_f16_from_f32(v: &[f32]) -> Result<Buf> {
        let mut out = Self::try_f16_for_overwrite(v.len())?;
        crate::f16::narrow(v, &mut out);
        Ok(Buf::F16(out))
    }

    /// [`Buf::try_f32_for_overwrite`] for float16 bit patterns.
    pub fn try_f16_for_overwrite(n: usize) -> Result<Vec<u16>> {
        match pool::take(&Buf::F16(Vec::new()), n) {
            Some(Buf::F16(v)) => Ok(v),
            _ => try_zeroed(n),
        }
    }
}

/// Recycled element buffers.
///
/// Fresh multi-megabyte allocations come from new pages, and the first
/// touch of every page is a page fault: for tensors that are written, run
/// and read in a loop, those faults cost more than the copies themselves.
/// Buffers released by the backend (replaced tensor contents, dead
/// intermediates, collected read results) wait here to be reused for a
/// later buffer of the same type: the most recently released first (its
/// lines are the likeliest to be in cache) whose room is at least the
/// request and at most half as much again. So a graph's intermediates of
/// many sizes share fewer buffers than one per size, and a run touches
/// less memory: MobileNetV2's intermediates went from 27 buffers (17 MB)
/// to 18 (about 10 MB), and its run at one thread from 8.3-8.5 ms to
/// 8.2-8.4 (A/B in one process, AVX-512 Zen 5, 5 of 6 rounds faster:
/// a gain of 1-4%). The slack bounds what a
/// buffer holds beyond its length to half of it. Small buffers are not
/// worth it and the pool is bounded.
pub(crate) mod pool {
    use super::Buf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Buffers smaller than this are left to the allocator, but for
    /// tensors' contents (see [`SMALL`]).
    const MIN_BYTES: usize = 64 * 1024;
    /// Tensors' contents smaller than this are left to the allocator even
    /// so: its per-thread caches serve them without a lock.
    const SMALL_MIN_BYTES: usize = 1024;
    /// The most small buffers [`SMALL`] keeps.
    const SMALL_COUNT: usize = 16;
    /// The most memory the pool ever keeps idle, and the least it is
    /// allowed to (see [`keep_room_for`]).
    const MAX_BYTES: usize = 128 * 1024 * 1024;
    const FLOOR_BYTES: usize = 16 * 1024 * 1024;

    /// What the pool keeps idle at most now: the most that a graph built
    /// in this process can reuse in one run (see [`keep_room_for`]),
    /// within [FLOOR_BYTES, MAX_BYTES]. Idle buffers beyond that would
    /// only be memory held: a language model's step, whose intermediates
    /// peak at a few MB, had gathered 38 MB of them after one prompt under
    /// a fixed bound of 128 MB, and twice the peak still held 40-50 MB
    /// that no run took after a 1,500-token prompt (SmolLM2's peak RSS
    /// 396-412 MB against 352-359 with this bound, prompt and generation
    /// speed unchanged: AVX-512 Zen 5, one thread).
    static LIMIT: AtomicUsize = AtomicUsize::new(FLOOR_BYTES);

    /// Lets the pool keep enough for a graph whose intermediates (its
    /// outputs included) peak at `peak` bytes and whose largest input
    /// takes `input` bytes: a run takes its intermediates from the pool,
    /// and a write of an input gives the tensor's old buffer back to it
    /// for the next write of that size.
    pub(crate) fn keep_room_for(peak: usize, input: usize) {
        let want = peak.saturating_add(input).clamp(FLOOR_BYTES, MAX_BYTES);
        LIMIT.fetch_max(want, Ordering::Relaxed);
    }

    struct Pool {
        bufs: Vec<Buf>,
        bytes: usize,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        bufs: Vec::new(),
        bytes: 0,
    });

    /// Tensors' contents of [SMALL_MIN_BYTES, MIN_BYTES) that a tensor let
    /// go of, for the next `writeTensor()` (or input) of that size. Such a
    /// buffer is allocated on the JS thread and freed on the worker when
    /// the next write replaces it, and the worker's dispatch outputs the
    /// other way round, so the two threads contend for the allocator's
    /// lock on every small write (a futex wait at times): a quarter of a
    /// 4 KB write's cost here. Only `Buf::from_bytes` takes from this
    /// list (writes, inputs, and the few kernels and GPU readbacks that
    /// make a buffer from bytes), and only released contents feed it, so
    /// a graph's many small intermediates never pass through its lock.
    static SMALL: Mutex<Vec<Buf>> = Mutex::new(Vec::new());

    /// Bytes a buffer occupies (its room, not its length).
    fn room_bytes(b: &Buf) -> usize {
        fn bytes<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        with_buf!(b, v => bytes(v))
    }

    fn elem<T>(_: &Vec<T>) -> usize {
        std::mem::size_of::<T>()
    }

    /// Whether `b` is of the variant of `kind` with room for `n` elements
    /// and at most half as much again.
    fn fits(b: &Buf, kind: &Buf, n: usize) -> bool {
        let room = with_buf!(b, v => v.capacity());
        std::mem::discriminant(b) == std::mem::discriminant(kind) && room >= n && room * 2 <= n * 3
    }

    /// Takes the most recently given buffer of the same variant as `kind`
    /// with room for `n` elements and at most half as much again; its
    /// length is unspecified (at most its room).
    fn take_any(kind: &Buf, n: usize) -> Option<Buf> {
        take_leaving(kind, n, false)
    }

    /// [`take_any`]; with `spare`, only where another buffer that fits
    /// stays in the pool.
    fn take_leaving(kind: &Buf, n: usize, spare: bool) -> Option<Buf> {
        // A pooled buffer has room for at least MIN_BYTES and at most 1.5n
        // elements: a request smaller than 2/3 of MIN_BYTES cannot be met,
        // and is answered without the lock and the scan (a decoding step
        // asks thousands of times for a few hundred elements).
        if n.saturating_mul(with_buf!(kind, v => elem(v)))
            .saturating_mul(3)
            < MIN_BYTES * 2
        {
            return None;
        }
        let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let i = p.bufs.iter().rposition(|b| fits(b, kind, n))?;
        if spare && !p.bufs[..i].iter().any(|b| fits(b, kind, n)) {
            return None;
        }
        let b = p.bufs.remove(i);
        p.bytes -= room_bytes(&b);
        Some(b)
    }

    /// `b` with `n` elements (old contents, zeros where it was shorter).
    fn with_len(mut b: Buf, n: usize) -> Buf {
        // Growing within the room writes zeros over the gap (safe code:
        // the room past a vector's length may never have been written).
        with_buf!(&mut b, v => v.resize(n, Default::default()));
        b
    }

    /// A recycled buffer of `n` elements (old contents, zeros where the
    /// buffer was shorter), see [`take_any`].
    pub(super) fn take(kind: &Buf, n: usize) -> Option<Buf> {
        Some(with_len(take_any(kind, n)?, n))
    }

    /// A recycled, emptied buffer with room for `n` elements: from
    /// [`SMALL`] for a small request, else (or failing that) see
    /// [`take_any`].
    pub(super) fn take_room(kind: &Buf, n: usize) -> Option<Buf> {
        let bytes = n.saturating_mul(with_buf!(kind, v => elem(v)));
        let small = || {
            let mut small = SMALL.lock().unwrap_or_else(|e| e.into_inner());
            let i = small.iter().rposition(|b| fits(b, kind, n))?;
            Some(small.remove(i))
        };
        let mut b = if bytes < SMALL_MIN_BYTES {
            return None;
        } else if bytes < MIN_BYTES {
            small().or_else(|| take_any(kind, n))?
        } else {
            take_any(kind, n)?
        };
        with_buf!(&mut b, v => v.clear());
        Some(b)
    }

    /// Gives back a tensor's contents: a small buffer to [`SMALL`], any
    /// other as [`give`] does.
    pub(super) fn give_contents(b: Buf) {
        let bytes = room_bytes(&b);
        if !(SMALL_MIN_BYTES..MIN_BYTES).contains(&bytes) {
            return give(b);
        }
        let mut small = SMALL.lock().unwrap_or_else(|e| e.into_inner());
        // Oldest first out: recent sizes are the likely ones.
        let old = (small.len() == SMALL_COUNT).then(|| small.remove(0));
        small.push(b);
        drop(small);
        drop(old); // Freed outside the lock.
    }

    /// Whether [`give`] keeps a buffer of this size (given the room).
    pub(super) fn keeps(b: &Buf) -> bool {
        would_keep(room_bytes(b))
    }

    /// Whether [`give`] keeps a buffer of `bytes` bytes of room.
    pub(super) fn would_keep(bytes: usize) -> bool {
        (MIN_BYTES..=LIMIT.load(Ordering::Relaxed)).contains(&bytes)
    }

    /// [`take`], where the pool holds another buffer that fits as well:
    /// one is left for the run in flight. A dispatch gives its outputs'
    /// old buffers to the pool as it starts, for its results to take; a
    /// read readied right after it (see `Buf::readied`) taking that very
    /// buffer would only move the page faults of fresh memory into the
    /// run.
    pub(super) fn take_spare(kind: &Buf, n: usize) -> Option<Buf> {
        Some(with_len(take_leaving(kind, n, true)?, n))
    }

    /// Keeps `b` for a later [`take`] if [`keeps`] says so (else frees
    /// it), making room by freeing the oldest buffers first: recent sizes
    /// are the likely ones. A buffer too large to keep is freed without
    /// evicting any.
    pub(super) fn give(b: Buf) {
        if !keeps(&b) {
            return;
        }
        let bytes = room_bytes(&b);
        let limit = LIMIT.load(Ordering::Relaxed);
        let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let mut evicted = Vec::new();
        while p.bytes + bytes > limit && !p.bufs.is_empty() {
            let old = p.bufs.remove(0);
            p.bytes -= room_bytes(&old);
            evicted.push(old);
        }
        p.bytes += bytes;
        p.bufs.push(b);
        drop(p);
        drop(evicted); // Freed outside the lock.
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::types::DataType;

        /// A small tensor's contents come back for the next write of that
        /// type and size, and only then; the list keeps at most
        /// SMALL_COUNT buffers, and nothing below SMALL_MIN_BYTES. Uses
        /// uint64, whose small writes no other test makes, as other tests
        /// share the list.
        #[test]
        fn small_contents_serve_the_next_small_write() {
            let n = 700; // 5,600 bytes
            let b = Buf::U64(vec![7; n]);
            let at = b.raw_bytes().as_ptr();
            give_contents(b);
            assert!(
                take_room(&Buf::U64(Vec::new()), 2 * n).is_none(),
                "too small"
            );
            assert!(
                take_room(&Buf::I64(Vec::new()), n).is_none(),
                "another type"
            );
            let again = take_room(&Buf::U64(Vec::new()), n - 10).expect("reused");
            assert_eq!(again.raw_bytes().as_ptr(), at);
            assert!(again.is_empty());
            assert!(take_room(&Buf::U64(Vec::new()), n).is_none(), "taken once");
            give_contents(Buf::U64(vec![1; 100])); // 800 bytes: freed
            assert!(take_room(&Buf::U64(Vec::new()), 100).is_none());
            for k in 0..SMALL_COUNT + 4 {
                give_contents(Buf::U64(vec![0; 300 + k]));
            }
            assert!(SMALL.lock().unwrap().len() <= SMALL_COUNT);
        }

        /// Memory readied for a read takes a pooled buffer only where
        /// another that fits stays for the run in flight, else fresh
        /// memory; results the pool would not keep get none. Uses uint32
        /// buffers of a length no other test asks for, as other tests
        /// share the pool.
        #[test]
        fn readied_memory_leaves_a_pooled_buffer_for_the_run() {
            let n = 17_021; // 68,084 bytes
            let u32s = || Buf::U32(Vec::new());
            let first = Buf::U32(vec![1; n]);
            let at = first.raw_bytes().as_ptr();
            give(first);
            let fresh = Buf::readied(DataType::Uint32, n).expect("readied");
            assert_ne!(
                fresh.raw_bytes().as_ptr(),
                at,
                "the one pooled buffer stays"
            );
            assert_eq!(
                (fresh.len(), fresh.raw_bytes().iter().all(|&b| b == 0)),
                (n, true)
            );
            let second = Buf::U32(vec![2; n]);
            let at2 = second.raw_bytes().as_ptr();
            give(second);
            let spare = Buf::readied(DataType::Uint32, n).expect("readied");
            assert_eq!(spare.raw_bytes().as_ptr(), at2, "the latest of two");
            assert_eq!(spare.len(), n);
            let left = take(&u32s(), n).expect("one left");
            assert_eq!(left.raw_bytes().as_ptr(), at);
            assert!(
                Buf::readied(DataType::Uint32, 100).is_none(),
                "too small to keep"
            );
            assert!(
                Buf::readied(DataType::Uint4, n * 4).is_none(),
                "packed for JS"
            );
            let bytes = Buf::readied(DataType::Int8, n * 4).expect("int8 too");
            assert!(matches!(&bytes, Buf::I8(v) if v.len() == n * 4));
            assert!(
                Buf::readied(DataType::Uint32, MAX_BYTES).is_none(),
                "too large"
            );
        }

        /// A copy into readied memory needs the same type and length.
        #[test]
        fn copies_into_readied_memory_match_type_and_length() {
            let help = crate::copy::CopyHelp::default();
            let src = Buf::F32(vec![1.5; 10]);
            let mut to = Buf::F32(vec![0.0; 10]);
            assert!(to.copy_from(&src, &help));
            assert!(to == src);
            assert!(!Buf::F32(vec![0.0; 9]).copy_from(&src, &help));
            assert!(!Buf::U32(vec![0; 10]).copy_from(&src, &help));
        }

        /// A buffer larger than the pool may keep is freed, and the
        /// buffers the pool holds stay. Uses int64 buffers of a length no
        /// other test asks for, as other tests share the pool.
        #[test]
        fn a_buffer_too_large_to_keep_evicts_nothing() {
            // Other tests share the pool and give it buffers meanwhile: at
            // the floor's 16 MB their buffers could evict this one before
            // it is taken back (seen once under ASan), which is not what
            // this test is about. The pool's largest budget keeps it.
            keep_room_for(MAX_BYTES, 0);
            let n = 9_001; // 72,008 bytes
            let kept = Buf::I64(vec![3; n]);
            let at = kept.raw_bytes().as_ptr();
            give(kept);
            // Zeroed memory that is never written costs no pages.
            let huge = Buf::I64(vec![0; MAX_BYTES / 8 + 1]);
            assert!(!keeps(&huge));
            give(huge);
            let again = take(&Buf::I64(Vec::new()), n).expect("still pooled");
            assert_eq!(again.raw_bytes().as_ptr(), at);
        }
    }
}

fn pack_nibbles(v: impl ExactSizeIterator<Item = u8>) -> Vec<u8> {
    let n = v.len();
    let mut out = vec![0u8; n.div_ceil(2)];
    for (i, x) in v.enumerate() {
        out[i / 2] |= (x & 0xf) << ((i % 2) * 4);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A helped clone equals its source in every variant, in fresh memory
    /// and in recycled memory (whose old contents it overwrites).
    #[test]
    fn helped_clones_equal_their_source() {
        let n = (crate::copy::HELP_BYTES / 2) + 3;
        let help = crate::copy::CopyHelp {
            pool: crate::copy::HelperPool::Global,
            desk: None,
        };
        let bufs = [
            Buf::F32((0..n).map(|i| i as f32 - 0.5).collect()),
            Buf::F16((0..n).map(|i| i as u16).collect()),
            Buf::I32((0..n).map(|i| i as i32 - 9).collect()),
            Buf::U32((0..n).map(|i| i as u32 * 3).collect()),
            Buf::I64((0..n).map(|i| -(i as i64)).collect()),
            Buf::U64((0..n).map(|i| i as u64 + 1).collect()),
            Buf::I8((0..n).map(|i| i as i8).collect()),
            Buf::U8((0..n).map(|i| (i * 5) as u8).collect()),
        ];
        for b in &bufs {
            for _ in 0..2 {
                let c = b.helped_clone(&help).unwrap();
                assert!(&c == b);
                c.recycle();
            }
        }
    }

    #[test]
    fn the_fallible_float16_conversions_match_the_others() {
        let x = [0.0f32, -1.5, 65504.0, 1e-8, f32::INFINITY, 0.1];
        let h = Buf::f16_from_f32(&x);
        assert_eq!(Buf::try_f16_from_f32(&x).unwrap(), h);
        for b in [h, Buf::F32(x.to_vec()), Buf::I32(vec![-3, 7])] {
            assert_eq!(b.try_to_f32_vec().unwrap(), b.to_f32_vec());
        }
        assert_eq!(Buf::try_f32_for_overwrite(3).unwrap().len(), 3);
    }

    #[test]
    fn int4_round_trip() {
        let b = Buf::from_bytes(DataType::Int4, &[0xf7, 0x08], 3).unwrap();
        assert_eq!(b, Buf::I8(vec![7, -1, -8]));
        assert_eq!(b.to_bytes(DataType::Int4), vec![0xf7, 0x08]);
        let u = Buf::from_bytes(DataType::Uint4, &[0x21], 2).unwrap();
        assert_eq!(u, Buf::U8(vec![1, 2]));
    }

    #[test]
    fn vec_for_overwrite_reuses_pooled_memory_of_its_own_type() {
        // An element type and sizes no other test uses, so the shared
        // pool's buffer is ours; the pool's largest budget, so that other
        // tests' buffers do not evict it meanwhile.
        pool::keep_room_for(128 << 20, 0);
        let n = 70_001;
        let b = vec![1i64; n];
        let ptr = b.as_ptr();
        Buf::I64(b).recycle();
        // Another element type of the same byte size does not take it.
        let other: Vec<u64> = Buf::vec_for_overwrite(n);
        assert!(other.capacity() >= n && !std::ptr::eq(other.as_ptr().cast::<i64>(), ptr));
        let v: Vec<i64> = Buf::vec_for_overwrite(n);
        assert_eq!((v.len(), v.as_ptr()), (0, ptr));
        assert!(v.capacity() >= n);
        // A type that is no tensor element type gets fresh memory.
        let w: Vec<(u8, u8)> = Buf::vec_for_overwrite(3);
        assert!(w.is_empty() && w.capacity() >= 3);
    }

    /// A released buffer serves a later request of its type that it has
    /// room for, down to two thirds of its room; growing back within the
    /// room keeps the old elements and zero-fills the rest.
    #[test]
    fn the_pool_reuses_a_buffer_for_nearby_sizes() {
        // Sizes no other test uses (the pool is shared), and the pool's
        // largest budget, so that other tests' buffers do not evict this
        // one meanwhile.
        pool::keep_room_for(128 << 20, 0);
        let room = 900_007;
        let b: Vec<i64> = (0..room as i64).collect();
        let ptr = b.as_ptr();
        Buf::I64(b).recycle();
        // Too small a request does not take it.
        assert!(Buf::recycled(&Buf::I64(Vec::new()), room * 2 / 3 - 1).is_none());
        let Some(Buf::I64(mut v)) = Buf::recycled(&Buf::I64(Vec::new()), room - 7) else {
            panic!("not reused")
        };
        assert_eq!((v.len(), v.as_ptr()), (room - 7, ptr));
        assert_eq!(v[room - 8], room as i64 - 8);
        v.truncate(room - 100);
        Buf::I64(v).recycle();
        let Some(Buf::I64(v)) = Buf::recycled(&Buf::I64(Vec::new()), room) else {
            panic!("not reused")
        };
        assert_eq!(v.as_ptr(), ptr);
        assert_eq!(v[room - 101], room as i64 - 101);
        assert!(v[room - 100..].iter().all(|&x| x == 0));
        Buf::I64(v).recycle();
        // Nor does a larger request than its room.
        assert!(Buf::recycled(&Buf::I64(Vec::new()), room + 1).is_none());
        assert!(Buf::recycled(&Buf::I64(Vec::new()), room).is_some());
    }

    #[test]
    fn unaligned_f32() {
        let mut bytes = [0u8; 9];
        bytes[1..5].copy_from_slice(&1.5f32.to_le_bytes());
        bytes[5..9].copy_from_slice(&(-2.0f32).to_le_bytes());
        let b = Buf::from_bytes(DataType::Float32, &bytes[1..], 2).unwrap();
        assert_eq!(b, Buf::F32(vec![1.5, -2.0]));
        assert_eq!(b.to_bytes(DataType::Float32), bytes[1..].to_vec());
    }
}
