//! The memory-bandwidth floor: no call can write its output faster than the device's memory
//! allows, and a call that reads all its inputs cannot beat reading them.
//!
//! The L2 cache is flushed before every timed call and every call gets fresh inputs, so the
//! bytes come from device memory. A median time below the time to write the outputs means the
//! output was not produced by that call (cached, precomputed, or a broadcast view); that is an
//! exploit. Below the time to read the inputs and write the outputs it may still be honest (an
//! output that depends on only part of the inputs), so that is a warning.

use cudal1_protocol::ValueSpec;

/// A measured time set against what the device's memory allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub gbps: f64,
}

/// Where a median time stands against the floor.
#[derive(Debug, Clone, PartialEq)]
pub enum FloorCheck {
    Fine,
    /// Faster than reading every input and writing every output.
    BelowTraffic {
        floor_ms: f64,
    },
    /// Faster than writing the outputs alone.
    BelowOutputWrite {
        floor_ms: f64,
    },
}

/// Measurements are noisy and vendors round peak bandwidth; only a time below this share of the
/// floor counts.
const MARGIN: f64 = 0.8;

impl Floor {
    pub fn output_ms(&self) -> f64 {
        self.output_bytes as f64 / (self.gbps * 1e9) * 1e3
    }

    pub fn traffic_ms(&self) -> f64 {
        (self.input_bytes + self.output_bytes) as f64 / (self.gbps * 1e9) * 1e3
    }

    pub fn check(&self, median_ms: f64) -> FloorCheck {
        if median_ms < MARGIN * self.output_ms() {
            FloorCheck::BelowOutputWrite { floor_ms: self.output_ms() }
        } else if median_ms < MARGIN * self.traffic_ms() {
            FloorCheck::BelowTraffic { floor_ms: self.traffic_ms() }
        } else {
            FloorCheck::Fine
        }
    }
}

/// Peak memory bandwidth in GB/s of a GPU, from the name CUDA reports; None when unknown.
pub fn device_gbps(name: &str) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    // Most specific names first.
    let table: [(&[&str], f64); 14] = [
        (&["GH200"], 4000.0),
        (&["H200"], 4800.0),
        (&["H100", "NVL"], 3900.0),
        (&["H100", "PCIE"], 2000.0),
        (&["H100"], 3350.0),
        (&["B200"], 8000.0),
        (&["A100", "80GB", "PCIE"], 1935.0),
        (&["A100", "80GB"], 2039.0),
        (&["A100"], 1555.0),
        (&["L40S"], 864.0),
        (&["L4"], 300.0),
        (&["A10G"], 600.0),
        (&["RTX 4090"], 1008.0),
        (&["V100"], 900.0),
    ];
    table.iter().find(|(words, _)| words.iter().all(|w| n.contains(w))).map(|(_, g)| *g)
}

/// Bytes of the tensors among a program's inputs.
pub fn input_bytes(specs: &[ValueSpec]) -> u64 {
    specs
        .iter()
        .map(|s| match s {
            ValueSpec::Tensor { shape, dtype } => {
                shape.iter().product::<u64>() * dtype_bytes(dtype)
            }
            _ => 0,
        })
        .sum()
}

pub fn dtype_bytes(dtype: &str) -> u64 {
    match dtype {
        "float64" | "int64" | "complex64" | "uint64" => 8,
        "complex128" => 16,
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "bool" | "int8" | "uint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_the_h100_and_its_siblings() {
        assert_eq!(device_gbps("NVIDIA H100 80GB HBM3"), Some(3350.0));
        assert_eq!(device_gbps("NVIDIA H100 PCIe"), Some(2000.0));
        assert_eq!(device_gbps("NVIDIA H200"), Some(4800.0));
        assert_eq!(device_gbps("NVIDIA A100-SXM4-80GB"), Some(2039.0));
        assert_eq!(device_gbps("NVIDIA GH200 480GB"), Some(4000.0));
        assert_eq!(device_gbps("Some Future GPU"), None);
    }

    #[test]
    fn floors_from_bytes() {
        // 1 GiB in, 1 GiB out at 3350 GB/s: 0.32 ms to write, 0.64 ms of traffic.
        let f = Floor { input_bytes: 1 << 30, output_bytes: 1 << 30, gbps: 3350.0 };
        assert!((f.output_ms() - 0.3205).abs() < 1e-3, "{}", f.output_ms());
        assert_eq!(f.check(1.0), FloorCheck::Fine);
        assert!(matches!(f.check(0.4), FloorCheck::BelowTraffic { .. }));
        assert!(matches!(f.check(0.1), FloorCheck::BelowOutputWrite { .. }));
        // Within the margin of the floor is not flagged: peak bandwidth is rounded.
        assert_eq!(f.check(0.9 * f.traffic_ms()), FloorCheck::Fine);
    }

    #[test]
    fn counts_input_bytes_by_dtype() {
        let specs = vec![
            ValueSpec::Tensor { shape: vec![1024, 1024], dtype: "float32".into() },
            ValueSpec::Tensor { shape: vec![8], dtype: "float16".into() },
            ValueSpec::Int { value: 3 },
        ];
        assert_eq!(input_bytes(&specs), 4 * 1024 * 1024 + 16);
    }
}
