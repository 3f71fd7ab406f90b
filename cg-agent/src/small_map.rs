//! [`SmallMap`]: a sorted map kept in one vector, for the maps that every process of a run
//! carries and that hold one to a few entries (its energy per domain, its threads' names).
//! A `BTreeMap` allocates a whole node (11 slots, ~330-370 bytes here) for its first entry;
//! this takes room for what it holds. Serialized as a JSON object, keys in order, as a
//! `BTreeMap` is.

use std::borrow::Borrow;

use serde::{Serialize, Serializer, ser::SerializeMap};

/// A map ordered by key, in a vector: lookups are binary searches, inserts shift the tail
/// (meant for a few entries per map, not for thousands).
#[derive(Clone, Debug, PartialEq)]
pub struct SmallMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap(Vec::new())
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    pub fn new() -> Self {
        SmallMap::default()
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Sets `key`'s value, returning the one it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SmallMap<K, V> {
    /// As a `BTreeMap` collects: entries in key order, the last value of a repeated key.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = SmallMap::new();
        for (k, v) in entries {
            map.insert(k, v);
        }
        map.0.shrink_to_fit();
        map
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for SmallMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for SmallMap<K, V> {
    type Output = V;

    /// Panics when `key` is absent, as a `BTreeMap` does.
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: Serialize, V: Serialize> Serialize for SmallMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn behaves_and_serializes_as_a_btreemap() {
        let entries = [
            ("dram-0", 2.0),
            ("package-0", 1.0),
            ("core", 3.0),
            ("dram-0", 4.0),
        ];
        let small: SmallMap<String, f64> =
            entries.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let tree: BTreeMap<String, f64> =
            entries.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        assert_eq!(
            serde_json::to_string(&small).unwrap(),
            serde_json::to_string(&tree).unwrap()
        );
        assert_eq!(small.len(), 3);
        assert_eq!(small.get("dram-0"), Some(&4.0));
        assert_eq!(small["core"], 3.0);
        assert!(!small.contains_key("gpu0"));
        let keys: Vec<&String> = small.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, tree.keys().collect::<Vec<_>>());

        let mut names = SmallMap::new();
        assert_eq!(names.insert(11u32, "b"), None);
        assert_eq!(names.insert(10, "a"), None);
        assert_eq!(names.insert(11, "c"), Some("b"));
        assert_eq!(names.values().copied().collect::<Vec<_>>(), ["a", "c"]);
        assert!(SmallMap::<u32, u32>::new().is_empty());
    }
}
