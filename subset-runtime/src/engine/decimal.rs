//! Exact arithmetic on `Decimal128` values, for the few deltas of a running sum that the engine
//! must compute itself (a patch's difference, a batch's total, a removal's negation) before the
//! server's `$inc` adds them. bson's `Decimal128` is only its bytes, so this reads them.
//!
//! A `Decimal128` is IEEE 754-2008 decimal128 in the binary integer decimal (BID) encoding, its
//! 16 bytes little-endian as BSON stores them: bit 127 is the sign; when bits 126 and 125 are not
//! both set, bits 126 to 113 are the exponent biased by 6176 and bits 112 to 0 the coefficient;
//! otherwise bits 126 to 122 tell infinity (`11110`) and NaN (`11111`), and anything else is a
//! coefficient above the largest (`10^34 - 1`), which the standard reads as zero. The value is
//! `(-1)^sign × coefficient × 10^exponent`.
//!
//! Addition is the standard's: exact, with the smaller exponent of the two, whenever the result
//! fits in 34 digits (money always does); otherwise rounded to 34 digits, to nearest and ties to
//! even, as the server rounds. No value passes through a float.

use crate::bson::Decimal128;

/// The largest coefficient: 34 nines.
const MAX_COEFFICIENT: u128 = 10u128.pow(34) - 1;
/// What the stored exponent is biased by.
const BIAS: i32 = 6176;
const MIN_EXPONENT: i32 = -BIAS;
const MAX_EXPONENT: i32 = 6111;
/// How far a coefficient is scaled up to align it with the other operand: below this, so that
/// one more digit still fits in a `u128`.
const ALIGN_LIMIT: u128 = 10u128.pow(37);

/// A finite `Decimal128`, decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Dec {
    negative: bool,
    coefficient: u128,
    exponent: i32,
}

impl Dec {
    /// The value of `d`; `None` for infinity and NaN, which no sum can hold.
    pub(crate) fn of(d: Decimal128) -> Option<Dec> {
        let bits = u128::from_le_bytes(d.bytes());
        let negative = bits >> 127 == 1;
        if (bits >> 122) & 0b11110 == 0b11110 {
            return None;
        }
        let (exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
            // The coefficient would be `0b100` followed by 111 bits: above the largest.
            (((bits >> 111) & 0x3fff) as i32, 0)
        } else {
            let coefficient = bits & ((1 << 113) - 1);
            (
                ((bits >> 113) & 0x3fff) as i32,
                if coefficient > MAX_COEFFICIENT {
                    0
                } else {
                    coefficient
                },
            )
        };
        Some(Dec {
            negative,
            coefficient,
            exponent: exponent - BIAS,
        })
    }

    /// The integer `n`, exactly (exponent 0).
    pub(crate) fn from_i64(n: i64) -> Dec {
        Dec {
            negative: n < 0,
            coefficient: u128::from(n.unsigned_abs()),
            exponent: 0,
        }
    }

    pub(crate) fn into_decimal128(self) -> Decimal128 {
        let biased = u128::from((self.exponent + BIAS).unsigned_abs());
        let bits = (u128::from(self.negative) << 127) | (biased << 113) | self.coefficient;
        Decimal128::from_bytes(bits.to_le_bytes())
    }

    /// `-self`: the sign bit flipped, nothing else.
    pub(crate) fn neg(self) -> Dec {
        Dec {
            negative: !self.negative,
            ..self
        }
    }

    pub(crate) fn is_zero(self) -> bool {
        self.coefficient == 0
    }

    /// Whether two values are one number, however written (`1.0` and `1.00`, `0` and `-0E+3`).
    pub(crate) fn same(self, other: Dec) -> bool {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => true,
            (false, false) => {
                let (a, b) = (self.trimmed(), other.trimmed());
                a.negative == b.negative
                    && a.coefficient == b.coefficient
                    && a.exponent == b.exponent
            }
            _ => false,
        }
    }

    /// The same number with no trailing zero in its coefficient (for comparison only: the
    /// exponent may leave the encodable range).
    fn trimmed(mut self) -> Dec {
        while self.coefficient != 0 && self.coefficient.is_multiple_of(10) {
            self.coefficient /= 10;
            self.exponent += 1;
        }
        self
    }

    /// The nearest `f64`, for a sum that mixes a decimal with a float (which the derive refuses).
    pub(crate) fn to_f64(self) -> f64 {
        self.into_decimal128()
            .to_string()
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// `self + other` as IEEE 754-2008 adds them: exact, with the smaller exponent, when the sum
    /// fits in 34 digits; rounded to nearest, ties to even, otherwise. `None` when it overflows.
    pub(crate) fn add(self, other: Dec) -> Option<Dec> {
        let (hi, lo) = if self.exponent >= other.exponent {
            (self, other)
        } else {
            (other, self)
        };
        let gap = hi.exponent.abs_diff(lo.exponent);
        // Scale the operand with the larger exponent up to the other's, as far as it fits.
        let (mut high, mut up) = (hi.coefficient, 0);
        while up < gap {
            match high.checked_mul(10) {
                Some(scaled) if scaled < ALIGN_LIMIT => {
                    high = scaled;
                    up += 1;
                }
                _ => break,
            }
        }
        // Shift the other down by the rest; what falls off only says "something below".
        let down = gap - up;
        let (mut low, inexact) = match 10u128.checked_pow(down) {
            Some(p) => (lo.coefficient / p, !lo.coefficient.is_multiple_of(p)),
            None => (0, lo.coefficient != 0),
        };
        let mut exponent = hi.exponent - up as i32;
        if inexact {
            // One more digit, holding a 1 for what fell off: rounding drops at least two digits
            // here (`high` has 37), so the result rounds as the exact sum would.
            high *= 10;
            low = low * 10 + 1;
            exponent -= 1;
        }
        let (negative, coefficient) = if hi.negative == lo.negative {
            (hi.negative, high + low)
        } else if high > low {
            (hi.negative, high - low)
        } else if low > high {
            (lo.negative, low - high)
        } else {
            // An exact zero from opposite signs is positive.
            (false, 0)
        };
        round(negative, coefficient, exponent)
    }
}

/// `coefficient × 10^exponent` in at most 34 digits, rounded to nearest and ties to even, and in
/// the encodable exponent range; `None` when it is too large for a `Decimal128`.
fn round(negative: bool, mut coefficient: u128, mut exponent: i32) -> Option<Dec> {
    let (mut first_dropped, mut rest_dropped) = (0, false);
    while coefficient > MAX_COEFFICIENT {
        rest_dropped |= first_dropped != 0;
        first_dropped = coefficient % 10;
        coefficient /= 10;
        exponent += 1;
    }
    let up = first_dropped > 5
        || (first_dropped == 5 && (rest_dropped || !coefficient.is_multiple_of(2)));
    if up {
        coefficient += 1;
        if coefficient > MAX_COEFFICIENT {
            coefficient /= 10;
            exponent += 1;
        }
    }
    // Past the largest exponent, trailing zeros may still make room (the standard's clamping).
    while exponent > MAX_EXPONENT && coefficient != 0 && coefficient * 10 <= MAX_COEFFICIENT {
        coefficient *= 10;
        exponent -= 1;
    }
    if exponent > MAX_EXPONENT {
        return (coefficient == 0).then_some(Dec {
            negative,
            coefficient,
            exponent: MAX_EXPONENT,
        });
    }
    Some(Dec {
        negative,
        coefficient,
        exponent: exponent.max(MIN_EXPONENT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Dec {
        let parsed: Decimal128 = text.parse().unwrap_or_else(|e| panic!("{text}: {e:?}"));
        Dec::of(parsed).unwrap_or_else(|| panic!("{text} is not finite"))
    }

    fn text(d: Dec) -> String {
        d.into_decimal128().to_string()
    }

    fn sum(a: &str, b: &str) -> String {
        text(
            dec(a)
                .add(dec(b))
                .unwrap_or_else(|| panic!("{a} + {b} overflows")),
        )
    }

    #[test]
    fn decodes_the_bid_encoding() {
        assert_eq!(
            dec("0.10"),
            Dec {
                negative: false,
                coefficient: 10,
                exponent: -2
            }
        );
        assert_eq!(
            dec("-1.5E+3"),
            Dec {
                negative: true,
                coefficient: 15,
                exponent: 2
            }
        );
        for t in [
            "0.10",
            "-7.25",
            "0E-6176",
            "9999999999999999999999999999999999E+6111",
        ] {
            assert_eq!(
                text(dec(t)),
                t.parse::<Decimal128>().map(|d| d.to_string()).unwrap()
            );
        }
        for special in ["NaN", "Infinity", "-Infinity"] {
            assert!(Dec::of(special.parse().unwrap()).is_none(), "{special}");
        }
        assert_eq!(text(dec("0.10").neg()), "-0.10");
        assert_eq!(text(Dec::from_i64(-42)), "-42");
    }

    #[test]
    fn adds_exactly_with_the_smaller_exponent() {
        assert_eq!(sum("0.10", "0.20"), "0.30");
        assert_eq!(sum("1", "0.10"), "1.10");
        assert_eq!(sum("0.10", "-0.10"), "0.00");
        assert_eq!(sum("-0.10", "0.05"), "-0.05");
        assert_eq!(sum("1E+3", "1"), "1001");
        let mut total = Dec::from_i64(0);
        for _ in 0..1000 {
            total = total.add(dec("0.10")).unwrap();
        }
        assert!(total.same(dec("100")));
        assert_eq!(text(total), "100.00");
    }

    #[test]
    fn rounds_past_34_digits_to_nearest_and_ties_to_even() {
        let nines = "9999999999999999999999999999999999";
        assert_eq!(sum(nines, "1"), "1.000000000000000000000000000000000E+34");
        assert_eq!(
            sum("1234567890123456789012345678901234", "0.5"),
            "1234567890123456789012345678901234"
        );
        assert_eq!(
            sum("1234567890123456789012345678901235", "0.5"),
            "1234567890123456789012345678901236"
        );
        assert_eq!(
            sum(
                "1234567890123456789012345678901234",
                "0.5000000000000000000000000000000001"
            ),
            "1234567890123456789012345678901235"
        );
        // Far apart: the smaller only decides the rounding.
        assert_eq!(
            sum("1E+50", "1E-50"),
            "1.000000000000000000000000000000000E+50"
        );
        assert_eq!(
            sum("1E+50", "-1E-50"),
            "1.000000000000000000000000000000000E+50"
        );
        assert!(dec("9.999999999999999999999999999999999E+6144")
            .add(dec("1E+6111"))
            .is_none());
    }

    #[test]
    fn compares_numbers_not_spellings() {
        assert!(dec("1.0").same(dec("1.00")));
        assert!(dec("0").same(dec("-0E+3")));
        assert!(dec("100").same(dec("1E+2")));
        assert!(!dec("1").same(dec("-1")));
        assert!(!dec("0.1").same(dec("0.10001")));
    }
}
