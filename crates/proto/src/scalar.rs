//! Loosely typed JSON fields of the wire: a field read as the scalar the client wrote,
//! borrowed from the body where it can be, and an element that may or may not be an object
//! (or an array).
//! Requests whose fields accept several JSON types (a partition id as a string or a number, a
//! status as a string or a boolean) deserialize into typed structs of these instead of a
//! `serde_json::Value` tree, and the one parser of each domain type decides what each JSON
//! type means.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// One JSON value. Absent and `null` are the same (`Null`); floats, integers outside `i64`,
/// arrays and objects are all `Other`, which no field of ours accepts.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Scalar<'a> {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Str(Cow<'a, str>),
    Other,
}

impl Scalar<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The same reading of an already parsed value.
impl<'a> From<&'a Value> for Scalar<'a> {
    fn from(value: &'a Value) -> Self {
        match value {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => n.as_i64().map_or(Scalar::Other, Scalar::Int),
            Value::String(s) => Scalar::Str(Cow::Borrowed(s)),
            Value::Array(_) | Value::Object(_) => Scalar::Other,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Scalar::Other, Scalar::Int))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    // A string with escapes cannot be borrowed from the body.
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

/// Echoed back as written, except `Other`, which renders as `null`.
impl Serialize for Scalar<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scalar::Null | Scalar::Other => s.serialize_unit(),
            Scalar::Bool(b) => s.serialize_bool(*b),
            Scalar::Int(i) => s.serialize_i64(*i),
            Scalar::Str(t) => s.serialize_str(t),
        }
    }
}

/// The scalar visits of a shape visitor: every scalar answers `$other`, so the caller refuses
/// the element with its own words instead of serde's.
macro_rules! other_shapes {
    ($other:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
}

/// A JSON value that is either an object, read as `T`, or anything else, kept as `NotObject`
/// so that the caller can refuse it with its own words instead of serde's.
#[derive(Debug)]
pub enum ObjectOr<T> {
    Object(T),
    NotObject,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjectOrVisitor(std::marker::PhantomData))
    }
}

struct ObjectOrVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOrVisitor<T> {
    type Value = ObjectOr<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(ObjectOr::Object)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        ScalarVisitor.visit_seq(seq).map(|_| ObjectOr::NotObject)
    }
    other_shapes!(ObjectOr::NotObject);
}

/// A JSON value that is either an array, its elements read as `T` in the same pass, or
/// anything else, kept as `NotArray`: a list field whose shape is refused in our words
/// without scanning the body twice.
#[derive(Debug)]
pub enum ArrayOr<T> {
    Array(Vec<T>),
    NotArray,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ArrayOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArrayOrVisitor(std::marker::PhantomData))
    }
}

struct ArrayOrVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ArrayOrVisitor<T> {
    type Value = ArrayOr<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(ArrayOr::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        ScalarVisitor.visit_map(map).map(|_| ArrayOr::NotArray)
    }
    other_shapes!(ArrayOr::NotArray);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_json_type_and_borrows_plain_strings() {
        let read = |text: &'static str| serde_json::from_str::<Scalar<'static>>(text).unwrap();
        assert_eq!(read("null"), Scalar::Null);
        assert_eq!(read("true"), Scalar::Bool(true));
        assert_eq!(read("-3"), Scalar::Int(-3));
        assert_eq!(read("18446744073709551615"), Scalar::Other);
        assert_eq!(read("1.5"), Scalar::Other);
        assert_eq!(read("[1, {\"a\": [2]}]"), Scalar::Other);
        assert_eq!(read("{\"a\": {\"b\": 1}}"), Scalar::Other);
        assert!(matches!(
            read("\"plain\""),
            Scalar::Str(Cow::Borrowed("plain"))
        ));
        assert!(matches!(read("\"a\\nb\""), Scalar::Str(Cow::Owned(s)) if s == "a\nb"));
        for text in [
            "null",
            "true",
            "-3",
            "1.5",
            "18446744073709551615",
            "[1]",
            "{}",
            "\"x\"",
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(Scalar::from(&value), read(text), "{text}");
        }
    }

    #[test]
    fn objects_are_told_from_everything_else() {
        #[derive(Deserialize)]
        struct One {
            a: i64,
        }
        let read = |text: &str| serde_json::from_str::<Vec<ObjectOr<One>>>(text).unwrap();
        let got = read("[{\"a\": 1}, [1, [2]], \"x\", 1, -1, 1.5, true, null, {\"a\": 2}]");
        let objects: Vec<_> = got
            .iter()
            .map(|o| match o {
                ObjectOr::Object(one) => Some(one.a),
                ObjectOr::NotObject => None,
            })
            .collect();
        assert_eq!(
            objects,
            [Some(1), None, None, None, None, None, None, None, Some(2)]
        );
    }

    #[test]
    fn arrays_are_told_from_everything_else() {
        let read = |text: &str| serde_json::from_str::<Vec<ArrayOr<i64>>>(text).unwrap();
        let got = read("[[1, 2], {\"a\": [3]}, \"x\", 1, -1, 1.5, true, null, []]");
        let arrays: Vec<_> = got
            .into_iter()
            .map(|a| match a {
                ArrayOr::Array(items) => Some(items),
                ArrayOr::NotArray => None,
            })
            .collect();
        assert_eq!(
            arrays,
            [
                Some(vec![1, 2]),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(vec![])
            ]
        );
        // An element of the wrong type inside an array is serde's error, not NotArray.
        assert!(serde_json::from_str::<ArrayOr<i64>>("[1, \"two\"]").is_err());
    }
}
