//! [`CachePadded`]: keeps a value on cache lines of its own.

/// Aligns `T` to 128 bytes (two 64-byte lines, as adjacent-line prefetchers pair them), so that
/// counters written on every wait do not bounce the line of a neighbouring value between cores.
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
