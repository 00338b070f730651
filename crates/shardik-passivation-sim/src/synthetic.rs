//! YCSB-style synthetic access patterns (loop, uniform, zipfian, scrambled zipfian, shifting
//! zipfian), driven by a seeded ChaCha8 generator so a seed fixes the whole stream.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_passivation::java_decimal_hash;

use crate::error::SimError;
use crate::id::SimId;

/// Synthetic generators (YCSB 0.17 algorithms, seeded ChaCha8 randomness).
#[derive(Debug, Clone, PartialEq)]
pub enum Synthetic {
    /// `start..=end` repeated.
    Loop {
        /// First id.
        start: u64,
        /// Last id (inclusive).
        end: u64,
    },
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest id.
        min: u64,
        /// Largest id.
        max: u64,
    },
    /// Zipfian over `min..=max` (popular ids are the small ones unless scrambled).
    Zipfian {
        /// Smallest id.
        min: u64,
        /// Largest id.
        max: u64,
        /// Zipfian constant (0.99).
        constant: f64,
        /// Scatter popular ids over the id space (YCSB scrambled zipfian).
        scrambled: bool,
    },
    /// Zipfian whose popular ids shift `shifts` times over the run.
    ShiftingZipfian {
        /// Smallest id.
        min: u64,
        /// Largest id.
        max: u64,
        /// Zipfian constant.
        constant: f64,
        /// Number of shifts.
        shifts: u64,
        /// Scrambled.
        scrambled: bool,
    },
}

/// YCSB `ZipfianGenerator` over `items` items starting at `base`.
#[derive(Debug, Clone)]
pub struct Zipfian {
    base: u64,
    items: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// zeta(10^10, 0.99) as precomputed by YCSB for the scrambled generator.
const ZETAN_SCRAMBLED: f64 = 26.469_028_201_783_02;
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;

impl Zipfian {
    /// Generator over `min..=max`.
    pub fn new(min: u64, max: u64, theta: f64) -> Self {
        let items = max - min + 1;
        Self::with_zetan(min, items, theta, zeta(items, theta))
    }

    fn with_zetan(base: u64, items: u64, theta: f64, zetan: f64) -> Self {
        let zeta2 = zeta(2, theta);
        Zipfian {
            base,
            items,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            half_pow_theta: 1.0 + 0.5f64.powf(theta),
        }
    }

    /// Next value.
    pub fn next(&self, rng: &mut ChaCha8Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < self.half_pow_theta {
            return self.base + 1;
        }
        let _ = self.theta;
        self.base + (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }
}

fn fnv_hash64(mut val: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        h ^= octet;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    (h as i64).unsigned_abs()
}

enum Gen {
    Plain(Zipfian),
    Scrambled { z: Zipfian, min: u64, items: u64 },
}

impl Gen {
    fn new(min: u64, max: u64, constant: f64, scrambled: bool) -> Gen {
        if scrambled {
            let z = if (constant - 0.99).abs() < 1e-12 {
                Zipfian::with_zetan(0, SCRAMBLED_ITEMS, constant, ZETAN_SCRAMBLED)
            } else {
                // computing zeta over 10^10 items is too slow: use the id-space size instead
                Zipfian::new(0, max - min, constant)
            };
            Gen::Scrambled {
                z,
                min,
                items: max - min + 1,
            }
        } else {
            Gen::Plain(Zipfian::new(min, max, constant))
        }
    }
    fn next(&self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            Gen::Plain(z) => z.next(rng),
            Gen::Scrambled { z, min, items } => min + fnv_hash64(z.next(rng)) % items,
        }
    }
}

fn synthetic_id(v: u64) -> SimId {
    SimId {
        id: v,
        hash: java_decimal_hash(v as i64),
    }
}

/// Iterator over a synthetic pattern.
pub fn synthetic_ids(
    generator: &Synthetic,
    events: u64,
    seed: u64,
) -> Result<Box<dyn Iterator<Item = SimId>>, SimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let check = |min: u64, max: u64| {
        if min > max {
            Err(SimError::Usage(format!(
                "synthetic range min {min} > max {max}"
            )))
        } else if max - min == u64::MAX {
            // The generators count `max - min + 1` ids, which must fit in 64 bits.
            Err(SimError::Usage(format!(
                "synthetic range {min}..={max} is too wide: at most 2^64 - 1 ids"
            )))
        } else {
            Ok(())
        }
    };
    Ok(match generator.clone() {
        Synthetic::Loop { start, end } => {
            check(start, end)?;
            let interval = end - start + 1;
            Box::new((0..events).map(move |i| synthetic_id(start + i % interval)))
        }
        Synthetic::Uniform { min, max } => {
            check(min, max)?;
            Box::new((0..events).map(move |_| synthetic_id(rng.random_range(min..=max))))
        }
        Synthetic::Zipfian {
            min,
            max,
            constant,
            scrambled,
        } => {
            check(min, max)?;
            let g = Gen::new(min, max, constant, scrambled);
            Box::new((0..events).map(move |_| synthetic_id(g.next(&mut rng))))
        }
        Synthetic::ShiftingZipfian {
            min,
            max,
            constant,
            shifts,
            scrambled,
        } => {
            check(min, max)?;
            let ids = max - min + 1;
            let shifts = shifts.max(1);
            let shift_by = ids / shifts;
            let shift_every = (events / shifts).max(1);
            let g = Gen::new(0, ids - 1, constant, scrambled);
            Box::new((0..events).map(move |event| {
                let shift = (event + 1) / shift_every * shift_by;
                synthetic_id(min + (g.next(&mut rng) + shift) % ids)
            }))
        }
    })
}
