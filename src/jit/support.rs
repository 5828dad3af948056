//! Runtime functions that MLIR's lowerings call by name and that fxmlir provides itself, so
//! that no MLIR runtime library has to be shipped or loaded.

use std::ffi::c_void;

/// An unranked memref as MLIR passes it to runtime functions: the rank and a pointer to the
/// ranked descriptor `{allocated, aligned, offset, sizes[rank], strides[rank]}`.
#[repr(C)]
pub struct UnrankedMemRef {
    rank: i64,
    descriptor: *const i64,
}

/// `memrefCopy`: copies between two memrefs of the same shape and any strides; the lowering of
/// `memref.copy` calls it when a layout is not the identity.
///
/// # Safety
/// Called only by compiled code, with descriptors MLIR built for live buffers of equal shape.
pub unsafe extern "C" fn memref_copy(
    element_size: i64,
    source: *const UnrankedMemRef,
    target: *const UnrankedMemRef,
) {
    // SAFETY: per the contract above, both descriptors are valid for their rank.
    unsafe {
        let (src, dst) = (&*source, &*target);
        let rank = src.rank.max(0) as usize;
        let read = |d: *const i64, i: usize| *d.add(i);
        let src_base = (read(src.descriptor, 1) as *const u8)
            .offset((read(src.descriptor, 2) * element_size) as isize);
        let dst_base = (read(dst.descriptor, 1) as *mut u8)
            .offset((read(dst.descriptor, 2) * element_size) as isize);
        let sizes: Vec<i64> = (0..rank).map(|i| read(src.descriptor, 3 + i)).collect();
        let src_strides: Vec<i64> = (0..rank)
            .map(|i| read(src.descriptor, 3 + rank + i))
            .collect();
        let dst_strides: Vec<i64> = (0..rank)
            .map(|i| read(dst.descriptor, 3 + rank + i))
            .collect();
        if sizes.iter().any(|&s| s <= 0) {
            return;
        }
        let element = element_size as usize;
        // The innermost dimension is copied as one block when it is contiguous on both sides
        // (a padded convolution input: rows of the image into rows of the padded buffer), else
        // element by element; the outer dimensions are walked with a multi-index.
        let (inner, outer) = match rank {
            0 => (1, 0),
            r => (sizes[r - 1], r - 1),
        };
        let contiguous = rank == 0 || (src_strides[outer] == 1 && dst_strides[outer] == 1);
        let mut index = vec![0i64; outer];
        loop {
            let (mut s, mut d) = (0isize, 0isize);
            for k in 0..outer {
                s += (index[k] * src_strides[k] * element_size) as isize;
                d += (index[k] * dst_strides[k] * element_size) as isize;
            }
            let (from, to) = (src_base.offset(s), dst_base.offset(d));
            if contiguous {
                std::ptr::copy_nonoverlapping(from, to, inner as usize * element);
            } else {
                let (step_from, step_to) = (
                    (src_strides[outer] * element_size) as isize,
                    (dst_strides[outer] * element_size) as isize,
                );
                for i in 0..inner as isize {
                    std::ptr::copy_nonoverlapping(
                        from.offset(i * step_from),
                        to.offset(i * step_to),
                        element,
                    );
                }
            }
            // Advance the outer multi-index, innermost dimension fastest.
            let mut k = outer;
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                index[k] += 1;
                if index[k] < sizes[k] {
                    break;
                }
                index[k] = 0;
            }
        }
    }
}

/// `__truncsfbf2`: f32 to bfloat16, rounded to nearest even (NaN stays a quiet NaN). LLVM
/// calls it for a conversion the CPU has no instruction for (hosts without AVX512-BF16);
/// compiler-rt defines it, but neither the process nor libgcc may. The bf16 result travels in
/// the low 16 bits of the float return register, as the x86-64 ABI passes `__bf16`.
pub extern "C" fn truncate_to_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    let half = if x.is_nan() {
        (bits >> 16) | 0x40
    } else {
        let lowest_kept = (bits >> 16) & 1;
        bits.wrapping_add(0x7FFF + lowest_kept) >> 16
    };
    f32::from_bits(half)
}

/// Symbols fxmlir defines for compiled code, by name.
pub fn lookup(symbol: &str) -> Option<usize> {
    match symbol {
        "memrefCopy" => Some(memref_copy as *const c_void as usize),
        "__truncsfbf2" => Some(truncate_to_bf16 as *const c_void as usize),
        "malloc" => Some(super::alloc::malloc as *const c_void as usize),
        "free" => Some(super::alloc::free as *const c_void as usize),
        crate::lower::HOST_CALL => Some(super::host::host_call as *const c_void as usize),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `memrefCopy` between two ranked descriptors (`[allocated, aligned, offset,
    /// sizes.., strides..]`) of `rank` over live buffers of `element_size`-byte elements.
    fn copy(element_size: i64, rank: i64, source: &[i64], target: &[i64]) {
        let s = UnrankedMemRef {
            rank,
            descriptor: source.as_ptr(),
        };
        let d = UnrankedMemRef {
            rank,
            descriptor: target.as_ptr(),
        };
        // SAFETY: the callers' descriptors describe live buffers of matching shape.
        unsafe { memref_copy(element_size, &s, &d) };
    }

    #[test]
    fn copies_a_transposed_view() {
        let src: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut dst = vec![0f32; 6];
        // src viewed as 3x2 with strides (1, 3) (a transpose); dst contiguous 3x2.
        let (from, to) = (src.as_ptr() as i64, dst.as_mut_ptr() as i64);
        copy(4, 2, &[from, from, 0, 3, 2, 1, 3], &[to, to, 0, 3, 2, 2, 1]);
        assert_eq!(dst, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    #[test]
    fn rounds_f32_to_bf16_to_nearest_even() {
        let bf16 = |x: f32| truncate_to_bf16(x).to_bits();
        assert_eq!(bf16(1.0), 0x3F80);
        assert_eq!(bf16(-2.5), 0xC020);
        // Halfway between 0x3F80 and 0x3F81 goes to the even one; just above, up.
        assert_eq!(bf16(f32::from_bits(0x3F80_8000)), 0x3F80);
        assert_eq!(bf16(f32::from_bits(0x3F81_8000)), 0x3F82);
        assert_eq!(bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
        assert_eq!(bf16(f32::MAX), 0x7F80);
        assert_eq!(bf16(f32::NEG_INFINITY), 0xFF80);
        assert_eq!(bf16(-0.0), 0x8000);
        assert_eq!(bf16(f32::from_bits(0x7F80_0001)), 0x7FC0);
    }

    #[test]
    fn copies_rank_zero() {
        let src = [7.5f64];
        let mut dst = [0f64];
        let (from, to) = (src.as_ptr() as i64, dst.as_mut_ptr() as i64);
        copy(8, 0, &[from, from, 0], &[to, to, 0]);
        assert_eq!(dst, [7.5]);
    }

    #[test]
    fn copies_rows_into_a_padded_buffer() {
        let src: Vec<f32> = (1..=6).map(|v| v as f32).collect();
        let mut dst = vec![0f32; 20];
        // src contiguous 2x3; dst the 2x3 interior of a 4x5 buffer at row 1, column 1.
        let (from, to) = (src.as_ptr() as i64, dst.as_mut_ptr() as i64);
        copy(4, 2, &[from, from, 0, 2, 3, 3, 1], &[to, to, 6, 2, 3, 5, 1]);
        let mut expected = vec![0f32; 20];
        expected[6..9].copy_from_slice(&[1.0, 2.0, 3.0]);
        expected[11..14].copy_from_slice(&[4.0, 5.0, 6.0]);
        assert_eq!(dst, expected);
    }
}
