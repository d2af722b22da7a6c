//! Keeping state that different threads write apart in memory.

use std::ops::{Deref, DerefMut};

/// `T` alone on its cache lines (128 bytes: x86 fetches lines in adjacent pairs, and some ARM
/// cores have 128-byte lines).
///
/// Locks and counters that every call takes sit in arrays (the registry shards, the store's key
/// shards) or next to read-mostly configuration. Packed together, two workers writing two
/// different shards would still fight over one cache line, and every call on one worker would
/// evict the configuration the other is reading.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CacheAligned<T>(pub(crate) T);

impl<T> Deref for CacheAligned<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for CacheAligned<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn neighbours_never_share_a_line() {
        let shards: [CacheAligned<Mutex<u8>>; 2] = Default::default();
        let first = std::ptr::from_ref(&shards[0]).addr();
        let second = std::ptr::from_ref(&shards[1]).addr();
        assert_eq!(first % 128, 0);
        assert_eq!(second - first, 128);
        *shards[1].lock().unwrap() = 7;
        assert_eq!(*shards[1].lock().unwrap(), 7);
    }
}
