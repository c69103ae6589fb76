//! The measuring loop every experiment shares. An operation is timed by [`time`], two by
//! [`side_by_side`]; a [`Run`] holds one measurement's latencies and rate, and [`closed_loop`]
//! makes one from concurrent tasks; [`Rounds`] measures several sides back to back, round after
//! round, and the [`Runs`] it returns give each side's median (min–max) over the rounds and the
//! ratios between sides within each round.

use std::future::{Future, IntoFuture};
use std::time::{Duration, Instant};

use crate::stats::{millis, quantile, sorted, Spread};
use crate::Res;

/// What the operations fail with; `Res`'s error.
type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs `op` and returns its output and its latency in ms.
///
/// # Errors
///
/// `op`'s error.
pub async fn time<T, E>(op: impl IntoFuture<Output = Result<T, E>>) -> Res<(T, f64)>
where
    E: Into<Error>,
{
    let start = Instant::now();
    let out = op.await.map_err(Into::into)?;
    Ok((out, millis(start.elapsed())))
}

/// Times `a` and `b` one after the other, `a` first when `a_first`: an A/B pair in which
/// neither side always runs first. Returns their latencies in ms, `a`'s first.
///
/// # Errors
///
/// The first error of either.
pub async fn side_by_side<E, F>(
    a_first: bool,
    a: impl IntoFuture<Output = Result<(), E>>,
    b: impl IntoFuture<Output = Result<(), F>>,
) -> Res<[f64; 2]>
where
    E: Into<Error>,
    F: Into<Error>,
{
    if a_first {
        let (_, a) = time(a).await?;
        let (_, b) = time(b).await?;
        Ok([a, b])
    } else {
        let (_, b) = time(b).await?;
        let (_, a) = time(a).await?;
        Ok([a, b])
    }
}

/// One measurement: the latencies of its operations and how many it made per second.
#[derive(Debug, Clone)]
pub struct Run {
    /// Milliseconds, sorted.
    latencies: Vec<f64>,
    rate: f64,
}

impl Run {
    /// Operations that ran one after the other: the rate is over the sum of their latencies.
    pub fn sequential(latencies: Vec<f64>) -> Run {
        let rate = latencies.len() as f64 / (latencies.iter().sum::<f64>() / 1e3);
        Run {
            latencies: sorted(latencies),
            rate,
        }
    }

    /// Operations started during `duration`.
    pub fn over(latencies: Vec<f64>, duration: Duration) -> Run {
        let rate = latencies.len() as f64 / duration.as_secs_f64();
        Run {
            latencies: sorted(latencies),
            rate,
        }
    }

    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The latencies, ms, sorted.
    pub fn latencies(&self) -> &[f64] {
        &self.latencies
    }

    pub fn len(&self) -> usize {
        self.latencies.len()
    }

    /// The median latency, ms.
    pub fn p50(&self) -> f64 {
        quantile(&self.latencies, 0.5)
    }

    pub fn p99(&self) -> f64 {
        quantile(&self.latencies, 0.99)
    }

    /// The slowest operation, ms (`NaN` for none).
    pub fn max(&self) -> f64 {
        self.latencies.last().copied().unwrap_or(f64::NAN)
    }

    /// The sum of the latencies, ms.
    pub fn total(&self) -> f64 {
        self.latencies.iter().sum()
    }
}

/// One task of a [`closed_loop`]: an operation it runs again and again, with whatever state it
/// keeps between them (a random generator, a counter).
pub trait Task: Send + 'static {
    fn op(&mut self) -> impl Future<Output = Res<()>> + Send;
}

/// Each of `tasks` runs its operation back to back (the next as soon as the last returns) for
/// `warmup` and then for `duration`; the operations started during `duration` are the run, its
/// rate their number over `duration`. The warm-up keeps the load on while the measurement
/// starts; for a warm-up of its own (a counter read in between), measure a run before and drop
/// it.
///
/// # Errors
///
/// The first error of any task.
pub async fn closed_loop<T: Task>(
    tasks: impl IntoIterator<Item = T>,
    warmup: Duration,
    duration: Duration,
) -> Res<Run> {
    let started = Instant::now();
    let (measure_from, end) = (started + warmup, started + warmup + duration);
    let handles: Vec<_> = tasks
        .into_iter()
        .map(|mut task| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    task.op().await?;
                    if now >= measure_from {
                        latencies.push(millis(now.elapsed()));
                    }
                }
                Res::Ok(latencies)
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await??);
    }
    Ok(Run::over(all, duration))
}

/// Which run of [`Rounds`] to measure.
#[derive(Debug, Clone, Copy)]
pub struct Turn {
    pub round: usize,
    pub side: usize,
}

/// `rounds` rounds, each measuring every one of `sides` once, back to back, so that the sides
/// of a round compare runs made close together: the load of a shared machine drifts over
/// minutes. Round `r` starts with side `r × shift` (modulo `sides`) and goes on in order,
/// wrapping around: `shift` 0 keeps one order, 1 rotates which side goes first, and `n` rotates
/// groups of `n` sides that keep their order within.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    pub rounds: usize,
    pub sides: usize,
    pub shift: usize,
}

impl Rounds {
    /// The side measured `j`-th in `round`.
    pub fn side(&self, round: usize, j: usize) -> usize {
        (j + round * self.shift) % self.sides
    }

    /// Calls `measure` for every turn, in order; `None` means the side did not run that round.
    ///
    /// # Errors
    ///
    /// The first error of `measure`.
    pub async fn run<R>(self, measure: impl AsyncFnMut(Turn) -> Res<Option<R>>) -> Res<Runs<R>> {
        self.run_in(|round, j| self.side(round, j), measure).await
    }

    /// [`Rounds::run`] in another order: `order(round, j)` is the side measured `j`-th in
    /// `round`, for each round a permutation of the sides (`shift` goes unused unless `order`
    /// calls [`Rounds::side`]).
    ///
    /// # Errors
    ///
    /// The first error of `measure`.
    pub async fn run_in<R>(
        self,
        order: impl Fn(usize, usize) -> usize,
        mut measure: impl AsyncFnMut(Turn) -> Res<Option<R>>,
    ) -> Res<Runs<R>> {
        let mut runs = Runs::new(self.sides);
        for round in 0..self.rounds {
            for j in 0..self.sides {
                let side = order(round, j);
                if let Some(r) = measure(Turn { round, side }).await? {
                    runs.record(Turn { round, side }, r);
                }
            }
        }
        Ok(runs)
    }
}

/// Measurements of several sides, each tagged with its round.
#[derive(Debug, Clone)]
pub struct Runs<R> {
    sides: Vec<Vec<(usize, R)>>,
}

impl<R> Runs<R> {
    pub fn new(sides: usize) -> Runs<R> {
        Runs {
            sides: (0..sides).map(|_| Vec::new()).collect(),
        }
    }

    pub fn record(&mut self, turn: Turn, r: R) {
        self.sides[turn.side].push((turn.round, r));
    }

    /// The measurements of `side`, in round order.
    pub fn of(&self, side: usize) -> impl Iterator<Item = &R> {
        self.sides[side].iter().map(|(_, r)| r)
    }

    /// Median, minimum and maximum over the rounds of `figure` of `side`.
    pub fn spread(&self, side: usize, figure: impl Fn(&R) -> f64) -> Spread {
        Spread::of(&self.of(side).map(figure).collect::<Vec<_>>())
    }

    /// Median, minimum and maximum over the rounds of `figure` of side `a` over `figure` of side
    /// `b` in the same round (rounds in which one of them did not run are left out).
    pub fn ratio(&self, a: usize, b: usize, figure: impl Fn(&R) -> f64) -> Spread {
        let ratios: Vec<f64> = self.sides[a]
            .iter()
            .filter_map(|(round, x)| {
                let (_, y) = self.sides[b].iter().find(|(r, _)| r == round)?;
                Some(figure(x) / figure(y))
            })
            .collect();
        Spread::of(&ratios)
    }
}
