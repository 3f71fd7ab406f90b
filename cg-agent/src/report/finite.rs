//! The report's last check: every number in it is finite. Sources reject what is not a
//! reading and attribution only adds, multiplies and divides finite figures by positive
//! ones, so a non-finite figure here is a bug; [`non_finite`] walks whatever is serialized
//! (every field, present and future) and names each one, so that the report says so rather
//! than writing `null` where a number belongs.

use serde::{Serialize, ser};

/// A non-finite figure: where in the report (`totals.domains.meter.energy_j`) and what.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFinite {
    pub path: String,
    pub value: f64,
}

/// Every non-finite number `value` serializes, by path.
pub fn non_finite(value: &impl Serialize) -> Vec<NonFinite> {
    let mut walker = Walker {
        path: Vec::new(),
        found: Vec::new(),
    };
    // The walker itself never fails; a type's own serialization might, and is then cut short.
    let _ = value.serialize(&mut walker);
    walker.found
}

struct Walker {
    path: Vec<String>,
    found: Vec<NonFinite>,
}

impl Walker {
    fn number(&mut self, value: f64) {
        if !value.is_finite() {
            self.found.push(NonFinite {
                path: self.path.join("."),
                value,
            });
        }
    }

    fn nested<T: Serialize + ?Sized>(&mut self, key: String, value: &T) -> Result<(), Error> {
        self.path.push(key);
        let result = value.serialize(&mut *self);
        self.path.pop();
        result
    }
}

#[derive(Debug)]
struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// Serializes a map key into a path segment.
struct KeyName;

macro_rules! key_as_display {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Result<String, Error> {
            Ok(v.to_string())
        })*
    };
}

impl ser::Serializer for KeyName {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = ser::Impossible<String, Error>;
    type SerializeTuple = ser::Impossible<String, Error>;
    type SerializeTupleStruct = ser::Impossible<String, Error>;
    type SerializeTupleVariant = ser::Impossible<String, Error>;
    type SerializeMap = ser::Impossible<String, Error>;
    type SerializeStruct = ser::Impossible<String, Error>;
    type SerializeStructVariant = ser::Impossible<String, Error>;

    key_as_display!(
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f32: f32, serialize_f64: f64, serialize_char: char,
        serialize_str: &str
    );

    fn serialize_bytes(self, _: &[u8]) -> Result<String, Error> {
        Ok("[bytes]".into())
    }
    fn serialize_none(self) -> Result<String, Error> {
        Ok("null".into())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<String, Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, Error> {
        Ok("()".into())
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<String, Error> {
        Ok(name.into())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<String, Error> {
        Ok(v.into())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<String, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
        _: &T,
    ) -> Result<String, Error> {
        Ok(v.into())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(Error("a sequence as a map key".into()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        Err(Error("a tuple as a map key".into()))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(Error("a tuple as a map key".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(Error("a tuple as a map key".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(Error("a map as a map key".into()))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        Err(Error("a struct as a map key".into()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(Error("a struct as a map key".into()))
    }
}

impl<'a> ser::Serializer for &'a mut Walker {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = &'a mut Walker;
    type SerializeStructVariant = &'a mut Walker;

    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.number(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.number(v);
        Ok(())
    }
    fn serialize_bool(self, _: bool) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.nested(variant.into(), v)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Error> {
        Ok(Seq {
            walker: self,
            index: 0,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Error> {
        self.serialize_seq(None)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, Error> {
        Ok(Map {
            walker: self,
            key: String::new(),
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<&'a mut Walker, Error> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<&'a mut Walker, Error> {
        Ok(self)
    }
}

struct Seq<'a> {
    walker: &'a mut Walker,
    index: usize,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let key = format!("[{}]", self.index);
        self.index += 1;
        // `a.b.[3]` reads worse than `a.b[3]`: glue the index to its sequence.
        match self.walker.path.pop() {
            Some(last) => {
                self.walker.path.push(format!("{last}{key}"));
                let result = v.serialize(&mut *self.walker);
                self.walker.path.pop();
                self.walker.path.push(last);
                result
            }
            None => self.walker.nested(key, v),
        }
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

struct Map<'a> {
    walker: &'a mut Walker,
    key: String,
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = key.serialize(KeyName).unwrap_or_else(|_| "?".into());
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.walker.nested(std::mem::take(&mut self.key), v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for &mut Walker {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.nested(key.into(), v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for &mut Walker {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.nested(key.into(), v)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Serialize)]
    struct Inner {
        energy_j: f64,
        maybe_w: Option<f64>,
    }

    #[derive(Serialize)]
    struct Outer {
        name: &'static str,
        count: u64,
        inner: Inner,
        list: Vec<Inner>,
        by_name: BTreeMap<String, Inner>,
        pairs: Vec<(u32, f64)>,
        #[serde(skip)]
        _hidden: f64,
    }

    fn inner(energy_j: f64, maybe_w: Option<f64>) -> Inner {
        Inner { energy_j, maybe_w }
    }

    #[test]
    fn finds_every_non_finite_number_by_path() {
        let value = Outer {
            name: "x",
            count: 3,
            inner: inner(1.0, Some(f64::INFINITY)),
            list: vec![inner(0.0, None), inner(f64::NAN, Some(2.0))],
            by_name: BTreeMap::from([("meter".to_string(), inner(f64::NEG_INFINITY, None))]),
            pairs: vec![(1, 2.0), (2, f64::NAN)],
            _hidden: f64::NAN,
        };
        let found: Vec<String> = non_finite(&value).into_iter().map(|f| f.path).collect();
        assert_eq!(
            found,
            [
                "inner.maybe_w",
                "list[1].energy_j",
                "by_name.meter.energy_j",
                "pairs[1][1]"
            ]
        );
    }

    #[test]
    fn finite_values_pass() {
        let value = Outer {
            name: "x",
            count: 3,
            inner: inner(1e300, Some(-0.0)),
            list: vec![],
            by_name: BTreeMap::new(),
            pairs: vec![(1, f64::MAX)],
            _hidden: 0.0,
        };
        assert!(non_finite(&value).is_empty());
    }
}
