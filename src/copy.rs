//! Large copies that the JS thread must make before it returns, shared with
//! the context's threads that are idle at that moment.
//!
//! `writeTensor` copies the caller's bytes at once (the spec's rule: the
//! caller may change them as soon as the call returns), and a read into
//! the caller's view copies on the JS thread too. A copy is bound by one
//! core's bandwidth, not the machine's: 4 MB took 0.29 ms on one core of a
//! Sapphire Rapids and 0.14 ms split over two. So the JS thread offers the
//! pieces of a large copy to the pool and to the context's worker, and
//! copies pieces itself from the first one on. The worker takes pieces
//! while it spins for its next command (it would hold its core anyway;
//! see [`HelpDesk`]). The JS thread never waits for a helper to become
//! free: a busy pool and a sleeping worker take no piece, and it copies
//! them all. It waits only for the pieces a helper has started, each a
//! fraction of a millisecond.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Which threads may help the JS thread copy for a context.
#[derive(Clone, Default)]
pub struct CopyHelp {
    pub pool: HelperPool,
    /// Where the context's worker looks for a copy to help with while it
    /// waits for a command.
    pub desk: Option<Arc<HelpDesk>>,
}

/// The pool whose idle threads may help.
#[derive(Clone, Default)]
pub enum HelperPool {
    /// None: the JS thread copies alone (GPU contexts, whose pool is not
    /// ours to use, and tests).
    #[default]
    None,
    /// rayon's global pool: a CPU context without `numThreads` computes
    /// on it.
    Global,
    /// The context's own pool (`numThreads`), one thread of which runs the
    /// context's timeline and so never helps. Weak: the pool's threads
    /// end with the context's backend, not when JS drops the context.
    Pool(Weak<rayon::ThreadPool>),
}

/// Copies smaller than this are made by the JS thread alone: they take
/// less than waking a pool thread costs (tens of microseconds at most).
pub const HELP_BYTES: usize = 1 << 20;

/// The pieces the threads take in turn: small enough that the JS thread
/// never waits long for a helper's last piece, large enough that taking
/// one costs nothing beside copying it.
const PIECE: usize = 128 * 1024;

/// The copy that the JS thread offers to its context's worker.
///
/// The worker spins for a while after each command, waiting for the next
/// one (`timeline::next_command`); a write's copy is what it waits for
/// then. Taking pieces of it instead of spinning uses the core it holds.
#[derive(Default)]
pub struct HelpDesk {
    /// Whether a copy is posted: the worker's cheap check at every turn.
    posted: AtomicBool,
    job: Mutex<Option<Arc<Job>>>,
}

impl HelpDesk {
    /// Takes pieces of the posted copy until none is left; false when
    /// nothing was posted.
    pub fn help(&self) -> bool {
        if !self.posted.load(Ordering::Acquire) {
            return false;
        }
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match job {
            Some(job) => {
                job.work();
                true
            }
            None => false,
        }
    }

    fn post(&self, job: &Arc<Job>) {
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(job));
        self.posted.store(true, Ordering::Release);
    }

    fn clear(&self) {
        self.posted.store(false, Ordering::Relaxed);
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// One copy, in pieces taken in order by whichever thread comes first.
struct Job {
    /// The source and destination as addresses, so that a helper job that
    /// runs after the copy is over (see [`Job::work`]) holds no pointer.
    src: usize,
    dst: usize,
    len: usize,
    pieces: usize,
    /// The next piece to take; at or past `pieces`, none is left.
    next: AtomicUsize,
    /// The pieces copied.
    done: AtomicUsize,
}

impl Job {
    /// Copies pieces until none is left to take.
    ///
    /// A helper may run this long after the copy is over (its pool was
    /// busy, or the worker took the job from the desk just before it was
    /// cleared): every piece was taken by then, so it takes none and
    /// touches no memory.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.pieces {
                return;
            }
            let at = i * PIECE;
            let n = PIECE.min(self.len - at);
            // SAFETY: [`copy_nonoverlapping`]'s contract makes `src` and
            // `dst` valid for `len` bytes, not overlapping, until it
            // returns, and it returns only after every piece taken is
            // copied (`done` reaches `pieces`); piece `i` is taken by this
            // thread alone (`fetch_add`), and `at + n <= len`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (self.src + at) as *const u8,
                    (self.dst + at) as *mut u8,
                    n,
                )
            };
            // Release: the caller reads the copied bytes after seeing the
            // count (Acquire).
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// [`std::ptr::copy_nonoverlapping`] of `len` bytes, with a thread of
/// `help`'s pool and its worker taking some of the pieces when they are
/// free.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`: `src` valid for reads and `dst` for
/// writes of `len` bytes, not overlapping, and neither changed by anyone
/// else until this returns (it returns only when the whole copy is made).
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize, help: &CopyHelp) {
    let pool = match &help.pool {
        HelperPool::Pool(p) if len >= HELP_BYTES => p.upgrade(),
        _ => None,
    };
    let pool_threads = match (&help.pool, &pool) {
        (HelperPool::Global, _) => rayon::current_num_threads(),
        // The worker's own thread never takes pool jobs while it waits
        // for commands (it takes the desk's instead).
        (HelperPool::Pool(_), Some(p)) => p.current_num_threads() - 1,
        // No pool, or the context's pool is gone with its backend.
        _ => 0,
    };
    if len < HELP_BYTES || (pool_threads == 0 && help.desk.is_none()) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let job = Arc::new(Job {
        src: src as usize,
        dst: dst as usize,
        len,
        pieces: len.div_ceil(PIECE),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    if let Some(desk) = &help.desk {
        desk.post(&job);
    }
    if pool_threads > 0 {
        let helper = Arc::clone(&job);
        match &pool {
            Some(p) => p.spawn(move || helper.work()),
            None => rayon::spawn(move || helper.work()),
        }
    }
    job.work();
    if let Some(desk) = &help.desk {
        desk.clear();
    }
    // Every piece is taken; wait for the ones a helper is still copying.
    let mut waits = 0u32;
    while job.done.load(Ordering::Acquire) < job.pieces {
        waits = waits.wrapping_add(1);
        if waits.is_multiple_of(64) {
            // A helper descheduled mid-piece needs a core to finish it.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_pool(pool: HelperPool) -> CopyHelp {
        CopyHelp { pool, desk: None }
    }

    /// Every form of help gives the same bytes, at sizes around the
    /// threshold and the pieces' edges; the desk is served by a thread
    /// that polls it as the worker does; and a helper that comes late (its
    /// pool busy until the copy is over) touches nothing.
    #[test]
    fn helped_copies_are_whole() {
        let pool = |n| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap(),
            )
        };
        let (one, pool) = (pool(1), pool(3));
        let desk = Arc::new(HelpDesk::default());
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (desk, stop) = (desk.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    desk.help();
                    std::hint::spin_loop();
                }
            })
        };
        let helps = [
            CopyHelp::default(),
            with_pool(HelperPool::Global),
            with_pool(HelperPool::Pool(Arc::downgrade(&pool))),
            with_pool(HelperPool::Pool(Arc::downgrade(&one))),
            with_pool(HelperPool::Pool(Weak::new())),
            CopyHelp {
                pool: HelperPool::None,
                desk: Some(desk.clone()),
            },
            CopyHelp {
                pool: HelperPool::Pool(Arc::downgrade(&pool)),
                desk: Some(desk.clone()),
            },
        ];
        for len in [
            0,
            1,
            HELP_BYTES - 1,
            HELP_BYTES,
            HELP_BYTES + 1,
            3 * HELP_BYTES + PIECE / 2 + 7,
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
            for help in &helps {
                let mut dst = vec![0xa5u8; len + 3];
                // SAFETY: `src` has `len` bytes and `dst` `len + 3`, two
                // vectors, both alive and unshared until the call returns.
                unsafe { copy_nonoverlapping(src.as_ptr(), dst[1..].as_mut_ptr(), len, help) };
                assert_eq!(dst[0], 0xa5, "len {len}");
                assert!(dst[1..=len] == src[..], "len {len}");
                assert_eq!(&dst[len + 1..], &[0xa5, 0xa5], "len {len}");
            }
        }
        // The desk is empty after every copy.
        assert!(!desk.help());
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        // Keep every thread of the pool busy, so that the helper job runs
        // only after the copy has returned and its buffers are gone.
        let threads = pool.current_num_threads();
        let busy = Arc::new(std::sync::Barrier::new(threads + 1));
        for _ in 0..threads {
            let busy = busy.clone();
            pool.spawn(move || {
                busy.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
            });
        }
        busy.wait();
        let len = 2 * HELP_BYTES;
        let src = vec![3u8; len];
        let mut dst = vec![0u8; len];
        let help = with_pool(HelperPool::Pool(Arc::downgrade(&pool)));
        // SAFETY: two live vectors of `len` bytes each.
        unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), len, &help) };
        assert!(dst.iter().all(|&b| b == 3));
        drop((src, dst));
        // The late helper runs on the freed pool and must not fault.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        pool.spawn(move || {
            let _ = go.send(());
        });
        wait.recv().unwrap();
    }

    /// Sized for Miri (scripts/miri.sh): one copy just over the threshold
    /// with the desk served by another thread and a pool that helps, and
    /// one whose pool helper runs after the copy is over and its buffers
    /// are freed; Miri checks every access of the pieces' threads.
    #[test]
    fn miri_sized_helped_copy() {
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap(),
        );
        let desk = Arc::new(HelpDesk::default());
        let served = {
            let desk = desk.clone();
            std::thread::spawn(move || {
                // Until it has helped once, or a while has passed.
                for _ in 0..100_000 {
                    if desk.help() {
                        break;
                    }
                    std::thread::yield_now();
                }
            })
        };
        let len = HELP_BYTES + 3;
        let src = vec![7u8; len];
        let mut dst = vec![0u8; len];
        let help = CopyHelp {
            pool: HelperPool::Pool(Arc::downgrade(&pool)),
            desk: Some(desk.clone()),
        };
        // SAFETY: two live vectors of `len` bytes each.
        unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), len, &help) };
        assert!(dst == src);
        served.join().unwrap();
        // A pool whose threads are held until the copy is over.
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let (started, start) = std::sync::mpsc::channel::<()>();
        for _ in 0..2 {
            let (held, started) = (held.clone(), started.clone());
            pool.spawn(move || {
                let _ = started.send(());
                let _ = held.lock().unwrap().recv();
            });
        }
        start.recv().unwrap();
        start.recv().unwrap();
        let (src, mut dst) = (vec![9u8; len], vec![0u8; len]);
        let help = with_pool(HelperPool::Pool(Arc::downgrade(&pool)));
        // SAFETY: two live vectors of `len` bytes each.
        unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), len, &help) };
        assert!(dst == src);
        drop((src, dst));
        hold.send(()).unwrap();
        hold.send(()).unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        pool.spawn(move || {
            let _ = go.send(());
        });
        wait.recv().unwrap();
    }
}
