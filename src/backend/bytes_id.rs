//! Constants' bytes by identity, the key of the caches through which the
//! graphs of one context share what they make of the same constant
//! tensors (converted and cast constants, packed quantized weights, device
//! buffers).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

/// A constant's bytes by identity: two are equal when they are the same
/// allocation. Comparing values instead would cost as much as the work
/// the caches save (a language model's weights are hundreds of MB).
///
/// The key holds a weak reference, which keeps the `Arc`'s allocation
/// (not the bytes) from being freed while the key exists, so its address
/// cannot be reused by other bytes and a key can never match bytes that
/// merely took the address of dropped ones.
#[derive(Clone, Debug)]
pub(crate) struct BytesId(Weak<Vec<u8>>);

impl BytesId {
    pub(crate) fn of(bytes: &Arc<Vec<u8>>) -> BytesId {
        BytesId(Arc::downgrade(bytes))
    }

    /// The bytes, while anything holds them.
    pub(crate) fn bytes(&self) -> Option<Arc<Vec<u8>>> {
        self.0.upgrade()
    }
}

impl PartialEq for BytesId {
    fn eq(&self, other: &Self) -> bool {
        Weak::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for BytesId {}

impl Hash for BytesId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.0.as_ptr(), state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_elsewhere_are_other_bytes() {
        let a = Arc::new(vec![1u8, 2, 3]);
        let b = Arc::new(vec![1u8, 2, 3]);
        assert_eq!(BytesId::of(&a), BytesId::of(&a.clone()));
        assert_ne!(BytesId::of(&a), BytesId::of(&b));
        // A key outlives its bytes without matching the next allocation.
        let old = BytesId::of(&a);
        drop(a);
        let c = Arc::new(vec![1u8, 2, 3]);
        assert_ne!(old, BytesId::of(&c));
    }
}
