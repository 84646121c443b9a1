//! Operand data types and descriptors (WebNN `MLOperandDataType`,
//! `MLOperandDescriptor`).

use crate::error::{Error, Result};

/// The largest rank any operand may have here.
pub const MAX_RANK: usize = 8;

/// `MLOperandDataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    Float32,
    Float16,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Int8,
    Uint8,
    Int4,
    Uint4,
}

impl DataType {
    pub const ALL: [DataType; 10] = [
        DataType::Float32,
        DataType::Float16,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Int8,
        DataType::Uint8,
        DataType::Int4,
        DataType::Uint4,
    ];

    pub fn parse(s: &str) -> Option<DataType> {
        Some(match s {
            "float32" => DataType::Float32,
            "float16" => DataType::Float16,
            "int32" => DataType::Int32,
            "uint32" => DataType::Uint32,
            "int64" => DataType::Int64,
            "uint64" => DataType::Uint64,
            "int8" => DataType::Int8,
            "uint8" => DataType::Uint8,
            "int4" => DataType::Int4,
            "uint4" => DataType::Uint4,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DataType::Float32 => "float32",
            DataType::Float16 => "float16",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int4 => "int4",
            DataType::Uint4 => "uint4",
        }
    }

    /// Bits per element in the external (JS) layout.
    pub fn bits(self) -> usize {
        match self {
            DataType::Float32 | DataType::Int32 | DataType::Uint32 => 32,
            DataType::Float16 => 16,
            DataType::Int64 | DataType::Uint64 => 64,
            DataType::Int8 | DataType::Uint8 => 8,
            DataType::Int4 | DataType::Uint4 => 4,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DataType::Float32 | DataType::Float16)
    }

    pub fn is_signed(self) -> bool {
        !matches!(
            self,
            DataType::Uint32 | DataType::Uint64 | DataType::Uint8 | DataType::Uint4
        )
    }

    /// Byte length of `elements` elements in the external layout (int4 and
    /// uint4 pack two elements per byte, low nibble first).
    pub fn byte_length(self, elements: usize) -> usize {
        (elements * self.bits()).div_ceil(8)
    }
}

/// The largest byte length of one tensor that this implementation accepts.
/// Larger shapes are refused with a TypeError instead of an allocation
/// failure deep inside a kernel.
pub const MAX_TENSOR_BYTE_LENGTH: usize = 1 << 34;

/// `MLOperandDescriptor`: a data type and a shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperandDescriptor {
    pub data_type: DataType,
    pub shape: Vec<usize>,
}

impl OperandDescriptor {
    /// Creates a descriptor, checking that its byte length is representable
    /// and within [`MAX_TENSOR_BYTE_LENGTH`].
    pub fn new(data_type: DataType, shape: Vec<usize>) -> Result<Self> {
        let d = OperandDescriptor { data_type, shape };
        d.checked_byte_length()?;
        Ok(d)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn byte_length(&self) -> usize {
        self.data_type.byte_length(self.element_count())
    }

    /// The byte length, or a TypeError when a dimension is not a valid
    /// dimension (an integer in [1, 2^31)), or the size overflows or is too
    /// large.
    pub fn checked_byte_length(&self) -> Result<usize> {
        if let Some(d) = self
            .shape
            .iter()
            .find(|&&d| d == 0 || d > i32::MAX as usize)
        {
            return Err(Error::type_error(format!(
                "the dimension {d} of shape {:?} is not in [1, 2^31)",
                self.shape
            )));
        }
        let mut n: usize = 1;
        for &d in &self.shape {
            n = n.checked_mul(d).ok_or_else(|| {
                Error::type_error(format!("the shape {:?} is too large", self.shape))
            })?;
        }
        // The element count must fit a `long` too (#926), whatever the
        // byte length.
        if n > i32::MAX as usize {
            return Err(Error::type_error(format!(
                "the shape {:?} has {n} elements, more than 2^31 - 1",
                self.shape
            )));
        }
        let bytes = n
            .checked_mul(self.data_type.bits())
            .map(|b| b.div_ceil(8))
            .filter(|&b| b <= MAX_TENSOR_BYTE_LENGTH)
            .ok_or_else(|| {
                Error::type_error(format!(
                    "the shape {:?} of {} is larger than {} bytes",
                    self.shape,
                    self.data_type.name(),
                    MAX_TENSOR_BYTE_LENGTH
                ))
            })?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_lengths() {
        assert_eq!(DataType::Int4.byte_length(3), 2);
        assert_eq!(DataType::Float16.byte_length(3), 6);
        let d = OperandDescriptor::new(DataType::Float32, vec![2, 3]).unwrap();
        assert_eq!(d.byte_length(), 24);
        assert!(OperandDescriptor::new(DataType::Float32, vec![1 << 40, 1 << 40]).is_err());
        assert!(OperandDescriptor::new(DataType::Float32, vec![usize::MAX, 2]).is_err());
        // At most 2^31 - 1 elements, even where the bytes would fit.
        assert!(OperandDescriptor::new(DataType::Uint8, vec![1 << 16, 1 << 15]).is_err());
        assert!(OperandDescriptor::new(DataType::Uint8, vec![(1 << 16) - 1, 1 << 15]).is_ok());
        assert!(OperandDescriptor::new(DataType::Float32, vec![2, 0]).is_err());
        assert!(OperandDescriptor::new(DataType::Float32, vec![]).is_ok());
    }
}
