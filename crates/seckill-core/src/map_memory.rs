//! Maps keyed by sale that give their memory back when sales are
//! forgotten.
//!
//! A `HashMap` keeps its capacity when entries are removed: an instance
//! that once served 10,000 sales would keep room for 10,000 in each of its
//! per-sale maps for the rest of its life. [`shrink_if_sparse`] gives the
//! room back once a map holds less than a quarter of it. Calling it after
//! every removal costs little: a shrink leaves the capacity near the
//! length, so the next one waits until three quarters of what is left has
//! gone too.

use std::collections::HashMap;
use std::hash::Hash;

/// Capacity below which a map is left as it is: not worth a reallocation.
const SMALL: usize = 64;

/// Shrink `map` to fit if it holds less than a quarter of its capacity.
pub fn shrink_if_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > SMALL && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_below_a_quarter_gives_its_room_back_and_not_before() {
        let mut map: HashMap<i64, u64> = (0..10_000).map(|n| (n, 0)).collect();
        map.retain(|n, _| *n < 5_000);
        shrink_if_sparse(&mut map);
        assert!(map.capacity() > 10_000, "half full: kept");
        map.retain(|n, _| *n < 10);
        shrink_if_sparse(&mut map);
        assert!(map.capacity() < 64, "{}", map.capacity());
        assert_eq!(map.len(), 10);
    }
}
