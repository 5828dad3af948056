//! Large outputs in blocks of fxmlir's allocator (`jit::alloc`), handed to PyTorch
//! as DLPack tensors whose deleter gives the block back.
//!
//! An out-of-place op writes a fresh output on every call. PyTorch's CPU allocator takes large
//! blocks from glibc, which maps them anew each time (above 32 MiB always, below it whenever
//! the heap was trimmed), so every call pays a page fault per 4 KiB of output: writing a fresh
//! 128 MiB tensor ran at a third of the speed of writing the same tensor again. Blocks from
//! fxmlir's allocator were written before and come back already mapped.
//!
//! The structs follow the DLPack 0.8 ABI (`dlpack.h`): a `DLManagedTensor` whose
//! `manager_ctx` owns the shape and strides it points to, and whose deleter frees the data
//! block and itself.

use crate::error::{Error, Result};
use crate::graph::{DType, TensorMeta};
use crate::jit::alloc;
use std::ffi::c_void;

/// `DLDeviceType::kDLCPU`.
pub const DEVICE_CPU: i32 = 1;

#[repr(C)]
pub struct Device {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
pub struct DataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct Tensor {
    pub data: *mut c_void,
    pub device: Device,
    pub ndim: i32,
    pub dtype: DataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct ManagedTensor {
    pub dl_tensor: Tensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut ManagedTensor)>,
}

/// What `manager_ctx` points to: the managed tensor and the arrays it addresses.
struct Holder {
    managed: ManagedTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// DLPack's type code and bit width of an element.
pub fn data_type(dtype: DType) -> DataType {
    // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6.
    let code = match dtype {
        DType::Bool => 6,
        DType::Uint8 => 1,
        DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 => 0,
        DType::Float16 | DType::Float32 | DType::Float64 => 2,
        DType::Bfloat16 => 4,
    };
    DataType {
        code,
        bits: 8 * dtype.byte_size() as u8,
        lanes: 1,
    }
}

/// Bytes a tensor laid out as `meta` spans: one element past its last one (none if empty).
pub fn extent_bytes(meta: &TensorMeta) -> Result<usize> {
    let too_large = || Error::Call(format!("an output of shape {:?} is too large", meta.shape));
    if meta.shape.contains(&0) {
        return Ok(0);
    }
    let mut last = 0usize;
    for (&d, &s) in meta.shape.iter().zip(&meta.strides) {
        let (d, s) = (
            usize::try_from(d).map_err(|_| too_large())?,
            usize::try_from(s).map_err(|_| too_large())?,
        );
        last = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(last))
            .ok_or_else(too_large)?;
    }
    (last + 1)
        .checked_mul(meta.dtype.byte_size())
        .ok_or_else(too_large)
}

/// A new, uninitialised tensor laid out as `meta` in a block of fxmlir's allocator. The
/// caller hands it to a DLPack consumer, which calls its deleter once; until then the caller
/// owns it (and calls the deleter itself if nobody takes it).
pub fn allocate(meta: &TensorMeta) -> Result<*mut ManagedTensor> {
    let bytes = extent_bytes(meta)?.max(1);
    // SAFETY: the block is released only by `delete`, through `alloc::free`.
    let data = unsafe { alloc::malloc(bytes) };
    if data.is_null() {
        return Err(Error::Call(format!(
            "out of memory allocating an output of {bytes} bytes"
        )));
    }
    let mut holder = Box::new(Holder {
        managed: ManagedTensor {
            dl_tensor: Tensor {
                data,
                device: Device {
                    device_type: DEVICE_CPU,
                    device_id: 0,
                },
                ndim: meta.shape.len() as i32,
                dtype: data_type(meta.dtype),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete),
        },
        shape: meta.shape.clone(),
        strides: meta.strides.clone(),
    });
    holder.managed.dl_tensor.shape = holder.shape.as_mut_ptr();
    holder.managed.dl_tensor.strides = holder.strides.as_mut_ptr();
    let holder = Box::into_raw(holder);
    // SAFETY: `holder` was just leaked; it stays valid until `delete` reclaims it.
    unsafe {
        (*holder).managed.manager_ctx = holder as *mut c_void;
        Ok(&mut (*holder).managed)
    }
}

/// The deleter of every tensor from [`allocate`]: the data block goes back to the allocator's
/// cache, the holder is dropped.
///
/// # Safety
/// `managed` came from [`allocate`] and is deleted once.
pub unsafe extern "C" fn delete(managed: *mut ManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `manager_ctx` is the holder `allocate` leaked; nothing uses it after this.
    unsafe {
        let holder = Box::from_raw((*managed).manager_ctx as *mut Holder);
        alloc::free(holder.managed.dl_tensor.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(shape: &[i64], strides: &[i64], dtype: DType) -> TensorMeta {
        TensorMeta {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype,
            device: "cpu".to_string(),
        }
    }

    #[test]
    fn extent_covers_strided_layouts() {
        let dense = meta(&[2, 3], &[3, 1], DType::Float32);
        assert_eq!(extent_bytes(&dense).ok(), Some(24));
        let transposed = meta(&[3, 2], &[1, 3], DType::Float64);
        assert_eq!(extent_bytes(&transposed).ok(), Some(48));
        let broadcast = meta(&[4, 5], &[0, 1], DType::Int16);
        assert_eq!(extent_bytes(&broadcast).ok(), Some(10));
        let empty = meta(&[4, 0], &[0, 1], DType::Float32);
        assert_eq!(extent_bytes(&empty).ok(), Some(0));
        let scalar = meta(&[], &[], DType::Bool);
        assert_eq!(extent_bytes(&scalar).ok(), Some(1));
        let huge = meta(&[i64::MAX, 4], &[4, 1], DType::Float32);
        assert!(extent_bytes(&huge).is_err());
    }

    #[test]
    fn deleted_blocks_come_back_for_the_next_tensor() {
        let m = meta(&[3, 1000, 1000], &[1_000_000, 1000, 1], DType::Float32);
        let a = allocate(&m).expect("allocates");
        // SAFETY: `a` is a live tensor from `allocate`, deleted once.
        unsafe {
            let t = &(*a).dl_tensor;
            assert_eq!(t.ndim, 3);
            assert_eq!(std::slice::from_raw_parts(t.shape, 3), &[3, 1000, 1000]);
            assert_eq!(
                std::slice::from_raw_parts(t.strides, 3),
                &[1_000_000, 1000, 1]
            );
            assert_eq!((t.dtype.code, t.dtype.bits, t.dtype.lanes), (2, 32, 1));
            assert_eq!(t.data as usize % 64, 0, "AVX-512 aligned");
            std::ptr::write_bytes(t.data as *mut u8, 1, 12_000_000);
            let data = t.data;
            ((*a).deleter.expect("has a deleter"))(a);
            let b = allocate(&m).expect("allocates");
            assert_eq!((*b).dl_tensor.data, data, "the freed block is reused");
            delete(b);
        }
    }
}
