//! Pipelines; Slices.

use super::*;

#[test]
fn pipelined_loops_with_the_consumer_spawned_first() {
    let _w = Watchdog::new("loops: pipeline (a loop hangs)", HANG);
    let n = 20_000;
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        for bucket in [1, 5, 256] {
            let ctx = format!("{threads} threads, bucket {bucket}");
            let input: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let output: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let stage1 = Arc::new(LoopPromise::with_bucket_size(0..n, bucket));
            let stage2 = Arc::new(LoopPromise::with_bucket_size(0..n, bucket));
            // Stage 3 first, then stage 2, then the producer.
            let total = Arc::new(AtomicUsize::new(0));
            let consumer3 = {
                let (output, total) = (output.clone(), total.clone());
                parallel_for(0..n).depends_on_each(&stage2).spawn(move |i| {
                    total.fetch_add(output[i].load(Relaxed), Relaxed);
                })
            };
            let consumer2 = {
                let (input, output, st2) = (input.clone(), output.clone(), stage2.clone());
                rt.run(|| {
                    parallel_for(0..n).depends_on_each(&stage1).spawn(move |i| {
                        let x = input[i].load(Relaxed);
                        assert_eq!(x, i + 1, "stage 2 read {i} before stage 1 wrote it");
                        output[i].store(x * 2, Relaxed);
                        st2.fulfill(i);
                    })
                })
            };
            // The producer: a blocking loop inside the runtime.
            rt.run(|| {
                parallel_for(0..n).for_each(|i| {
                    uneven_work(i, n);
                    input[i].store(i + 1, Relaxed);
                    stage1.fulfill(i);
                })
            });
            consumer2.join();
            consumer3.join();
            assert_eq!(total.load(Relaxed), n * (n + 1), "{ctx}");
            for (i, o) in output.iter().enumerate() {
                assert_eq!(o.load(Relaxed), 2 * (i + 1), "{ctx}: output {i}");
            }
        }
    }
}

#[test]
fn pipelined_loops_in_a_scope_with_a_reduction() {
    let _w = Watchdog::new("loops: scoped pipeline (a loop hangs)", HANG);
    let rt = runtime(4);
    let n = 10_000;
    for stride in [1, 3] {
        let lp = LoopPromise::with_bucket_size(0..n, 10);
        let squares: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        let (collected, ()) = rt.run(|| {
            selvedge::join(
                || {
                    parallel_for(0..n)
                        .stride(stride)
                        .depends_on_each(&lp)
                        .reduce(
                            Vec::new,
                            |mut v, i| {
                                v.push(squares[i].load(Relaxed));
                                v
                            },
                            |mut a, b| {
                                a.extend(b);
                                a
                            },
                        )
                },
                || {
                    // Produced backwards, so the consumer parks a lot.
                    parallel_for(0..n).for_each(|k| {
                        let i = n - 1 - k;
                        squares[i].store(i * i, Relaxed);
                        lp.fulfill(i);
                    })
                },
            )
        });
        let want: Vec<usize> = (0..n).step_by(stride).map(|i| i * i).collect();
        assert!(collected == want, "stride {stride}");
    }
}

// ---------------------------------------------------------------------
// Slices
// ---------------------------------------------------------------------

#[test]
fn par_chunks_mut_gives_every_chunk_once_with_its_index() {
    let rt = runtime(4);
    for len in [0, 1, 9, 10, 11, 1000, 100_003] {
        for chunk_len in [1, 3, 10, 64, 1000, 200_000] {
            let ctx = format!("len {len}, chunk {chunk_len}");
            let mut v: Vec<(usize, usize)> = vec![(usize::MAX, usize::MAX); len];
            let chunks = len.div_ceil(chunk_len);
            assert_eq!(par_chunks_mut(&mut v, chunk_len).len(), chunks, "{ctx}");
            assert_eq!(par_chunks_mut(&mut v, chunk_len).is_empty(), len == 0);
            let counts = counters(chunks);
            let bad_len = AtomicUsize::new(0);
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each(|c, chunk| {
                    counts[c].fetch_add(1, Relaxed);
                    let want = chunk_len.min(len - c * chunk_len);
                    if chunk.len() != want {
                        bad_len.fetch_add(1, Relaxed);
                    }
                    for (k, x) in chunk.iter_mut().enumerate() {
                        uneven_work(c * chunk_len + k, len);
                        *x = (c, k);
                    }
                })
            });
            assert_eq!(
                bad_len.load(Relaxed),
                0,
                "{ctx}: a chunk had the wrong length"
            );
            assert_counts(&counts, |_| 1, &ctx);
            let mut want = vec![(0, 0); len];
            for (c, chunk) in want.chunks_mut(chunk_len).enumerate() {
                for (k, x) in chunk.iter_mut().enumerate() {
                    *x = (c, k);
                }
            }
            assert!(v == want, "{ctx}");
        }
    }
    // From a foreign thread, with non-Copy elements.
    let mut words: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    par_chunks_mut(&mut words, 100).for_each(|c, chunk| {
        for w in chunk {
            w.push_str(&format!("@{c}"));
        }
    });
    assert!(words
        .iter()
        .enumerate()
        .all(|(i, w)| *w == format!("{i}@{}", i / 100)));
}

#[test]
fn par_iter_mut_matches_a_serial_loop() {
    for threads in [2, 8] {
        let rt = runtime(threads);
        for len in [0, 1, 17, 1_000_000] {
            let mut v: Vec<u64> = (0..len as u64).map(|x| x ^ 0x5555).collect();
            let mut want = v.clone();
            for (i, x) in want.iter_mut().enumerate() {
                *x = x.wrapping_mul(3).wrapping_add(i as u64);
            }
            let counts = counters(len);
            rt.run(|| {
                par_iter_mut(&mut v).for_each(|i, x| {
                    uneven_work(i, len);
                    counts[i].fetch_add(1, Relaxed);
                    *x = x.wrapping_mul(3).wrapping_add(i as u64);
                })
            });
            assert!(v == want, "{threads} threads, len {len}");
            assert_counts(&counts, |_| 1, &format!("{threads} threads, len {len}"));
        }
    }
    // Non-Copy elements, from a foreign thread.
    let mut v: Vec<Vec<usize>> = vec![Vec::new(); 1000];
    par_iter_mut(&mut v).for_each(|i, x| x.extend(0..i % 7));
    assert!(v.iter().enumerate().all(|(i, x)| x.len() == i % 7));
}

#[test]
fn a_panic_in_par_chunks_mut_reaches_the_caller() {
    let rt = runtime(4);
    let mut v = vec![0u32; 10_000];
    let msg = panic_message(|| {
        rt.run(|| {
            par_chunks_mut(&mut v, 10).for_each(|c, chunk| {
                chunk.fill(1);
                if c == 500 {
                    panic!("chunk {c}");
                }
            })
        })
    });
    assert_eq!(msg, "chunk 500");
    assert!(v.iter().all(|&x| x == 1), "every other chunk still ran");
    let msg = panic_message(|| {
        par_iter_mut(&mut v).for_each(|i, x| {
            *x = 2;
            if i == 9_999 {
                panic!("element {i}");
            }
        })
    });
    assert_eq!(msg, "element 9999");
    assert!(v.iter().all(|&x| x == 2));
}

/// Checks the spans one `for_each_span` loop over `len` elements in chunks
/// of `chunk_len` was called with (`(first chunk, offset of the span in the
/// slice, span length)`): each starts where its first chunk starts, holds
/// whole chunks (but for one ending the slice), and together they cover
/// every chunk exactly once.
#[track_caller]
fn assert_spans_tile(spans: &[(usize, usize, usize)], len: usize, chunk_len: usize, ctx: &str) {
    let chunks = len.div_ceil(chunk_len);
    let mut seen = vec![0u32; chunks];
    for &(first, offset, span_len) in spans {
        assert_eq!(offset, first * chunk_len, "{ctx}: span at chunk {first}");
        assert!(span_len > 0, "{ctx}: empty span at chunk {first}");
        let end = offset + span_len;
        assert!(
            span_len % chunk_len == 0 || end == len,
            "{ctx}: span at chunk {first} of {span_len} elements is not whole chunks"
        );
        for n in &mut seen[first..end.div_ceil(chunk_len)] {
            *n += 1;
        }
    }
    assert_counts(
        &seen.iter().map(|&n| AtomicU32::new(n)).collect::<Vec<_>>(),
        |_| 1,
        ctx,
    );
}

#[test]
fn for_each_span_covers_every_chunk_once_in_whole_chunk_spans() {
    let rt = runtime(4);
    for len in [0, 1, 9, 10, 11, 1000, 100_003] {
        for chunk_len in [1, 3, 10, 64, 1000, 200_000] {
            let ctx = format!("len {len}, chunk {chunk_len}");
            let mut v = vec![usize::MAX; len];
            let base = v.as_ptr() as usize;
            let spans = Mutex::new(Vec::new());
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each_span(|first, span| {
                    let offset = (span.as_ptr() as usize - base) / std::mem::size_of::<usize>();
                    spans.lock().unwrap().push((first, offset, span.len()));
                    for (k, x) in span.iter_mut().enumerate() {
                        uneven_work(offset + k, len);
                        *x = offset + k;
                    }
                })
            });
            assert_spans_tile(&spans.into_inner().unwrap(), len, chunk_len, &ctx);
            assert!(
                v.iter().copied().eq(0..len),
                "{ctx}: every element written once, in place"
            );
        }
    }
}

#[test]
fn for_each_span_on_one_worker_is_one_call_for_the_whole_slice() {
    // No thief ever asks, so nothing is split: the span is everything.
    let rt = runtime(1);
    let mut v = vec![0u8; 10_000];
    let calls = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut v, 7).for_each_span(|first, span| {
            calls.lock().unwrap().push((first, span.len()));
            span.fill(1);
        })
    });
    assert_eq!(calls.into_inner().unwrap(), [(0, 10_000)]);
    assert!(v.iter().all(|&x| x == 1));
}

#[test]
fn for_each_span_in_an_outer_loop_splits_only_when_the_outer_loop_cannot_feed_thieves() {
    // An outer loop of long iterations, each an inner span loop: thieves
    // take outer iterations, so inner loops stay whole while the outer one
    // has iterations to spare. Over many repetitions most inner loops run
    // as one span (counted over all of them: with more workers than cores,
    // how many of one repetition's last rows are split depends on when
    // the OS lets sleepers run); every element is still written exactly
    // once.
    let rt = runtime(4);
    let (outer, inner, chunk, reps) = (64, 4096, 256, 5);
    let mut rows = vec![0u32; outer * inner];
    let spans_per_row: Vec<AtomicU32> = counters(outer);
    let mut whole = Vec::new();
    for rep in 0..reps {
        rows.fill(0);
        for c in &spans_per_row {
            c.store(0, Relaxed);
        }
        rt.run(|| {
            par_chunks_mut(&mut rows, inner).for_each(|r, row| {
                par_chunks_mut(row, chunk).for_each_span(|_, span| {
                    spans_per_row[r].fetch_add(1, Relaxed);
                    for x in span.iter_mut() {
                        spin(20);
                        *x += 1;
                    }
                })
            })
        });
        assert!(
            rows.iter().all(|&x| x == 1),
            "rep {rep}: an element was lost or written twice"
        );
        whole.push(
            spans_per_row
                .iter()
                .filter(|c| c.load(Relaxed) == 1)
                .count(),
        );
    }
    assert!(
        whole.iter().sum::<usize>() * 2 > outer * reps,
        "of {outer} inner loops in each repetition, so many ran as one span: {whole:?}"
    );
}

#[test]
fn a_lone_span_loop_still_feeds_a_worker_that_asks_after_it_began() {
    // As in a batched GEMM of one matrix: the scope's first task (which
    // the idle worker takes at once, and which ends at once) is all the
    // other work there is, and the idle worker asks again only after the
    // span loop started. It must still get a share of the loop: spans
    // stay short while workers are asking.
    let rt = runtime(2);
    let mut v = vec![0u8; 16];
    for rep in 0..5 {
        let threads = Mutex::new(HashSet::new());
        rt.run(|| {
            scope(|s| {
                s.spawn(|_| {});
                par_chunks_mut(&mut v, 1).for_each_span(|_, span| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    // A kernel call: uninterruptible, 5 ms per chunk.
                    std::thread::sleep(Duration::from_millis(5) * span.len() as u32);
                    span.fill(1);
                })
            })
        });
        assert!(v.iter().all(|&x| x == 1));
        v.fill(0);
        let threads = threads.into_inner().unwrap().len();
        assert_eq!(threads, 2, "rep {rep}: the loop ran on {threads} worker(s)");
    }
}

#[test]
fn a_lone_span_loop_reaches_every_sleeping_worker_before_its_first_span_ends() {
    // One large kernel loop (a GEMM of one matrix) while the other workers
    // sleep: sleepers send no requests, so the loop hands them shares
    // before it runs a span, and each woken worker does the same with its
    // share before its own first span. Handing one share at a time, only
    // as a part starts and when a span ends, reaches a new worker only
    // when a 200 ms span ends: before that, the chain of halves (8, 4, 2,
    // 1 of 16 chunks) wakes only 4 of the 7 sleepers.
    let workers = 8;
    let rt = runtime(workers);
    let mut v = vec![0u8; 16];
    for rep in 0..3 {
        // Long enough idle for every worker to be asleep.
        std::thread::sleep(Duration::from_millis(300));
        let starts = Mutex::new(Vec::new());
        let first_end = Mutex::new(None::<Instant>);
        rt.run(|| {
            par_chunks_mut(&mut v, 1).for_each_span(|_, span| {
                starts
                    .lock()
                    .unwrap()
                    .push((std::thread::current().id(), Instant::now()));
                // A kernel call: uninterruptible, 200 ms per chunk.
                std::thread::sleep(Duration::from_millis(200) * span.len() as u32);
                span.fill(1);
                first_end.lock().unwrap().get_or_insert_with(Instant::now);
            })
        });
        assert!(v.iter().all(|&x| x == 1), "rep {rep}: a chunk did not run");
        v.fill(0);
        let first_end = first_end.into_inner().unwrap().expect("a span ran");
        let early: HashSet<_> = starts
            .into_inner()
            .unwrap()
            .into_iter()
            .filter(|&(_, t)| t < first_end)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            early.len(),
            workers,
            "rep {rep}: only {} of {workers} workers started a span before the first span ended",
            early.len()
        );
    }
}

#[test]
fn chunks_of_zero_sized_elements_near_usize_max() {
    // A slice of `()` may be as long as usize::MAX: the last span's end
    // must not overflow.
    let rt = runtime(2);
    let mut units = vec![(); usize::MAX];
    let chunk = usize::MAX / 3 + 1;
    let seen = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut units, chunk).for_each_span(|first, span| {
            seen.lock().unwrap().push((first, span.len()));
        })
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    let total: u128 = seen.iter().map(|&(_, n)| n as u128).sum();
    assert_eq!(total, usize::MAX as u128, "{seen:?}");
    assert_eq!(seen[0].0, 0);
    // And chunk by chunk.
    let lens = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut units, chunk)
            .for_each(|c, chunk| lens.lock().unwrap().push((c, chunk.len())))
    });
    let mut lens = lens.into_inner().unwrap();
    lens.sort();
    assert_eq!(lens, [(0, chunk), (1, chunk), (2, usize::MAX - 2 * chunk)]);
}

#[test]
fn a_panicking_span_is_not_run_again_and_the_other_spans_run_once() {
    let rt = runtime(4);
    for rep in 0..20 {
        let ctx = format!("rep {rep}");
        let (len, chunk_len) = (20_000, 10);
        let mut v = vec![0u32; len];
        let base = v.as_ptr() as usize;
        let panicked_span = Mutex::new(None);
        let msg = panic_message(|| {
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each_span(|first, span| {
                    let offset = (span.as_ptr() as usize - base) / std::mem::size_of::<u32>();
                    for (k, x) in span.iter_mut().enumerate() {
                        uneven_work(offset + k, len);
                        *x += 1;
                    }
                    let chunks = first..(offset + span.len()).div_ceil(chunk_len);
                    if chunks.contains(&1000) {
                        *panicked_span.lock().unwrap() = Some(chunks);
                        panic!("span with chunk 1000");
                    }
                })
            })
        });
        assert_eq!(msg, "span with chunk 1000", "{ctx}");
        let lost = panicked_span.into_inner().unwrap().expect("the span ran");
        for (c, chunk) in v.chunks(chunk_len).enumerate() {
            // The panicking span wrote its elements before panicking; no
            // chunk, its own included, ran twice.
            assert!(
                chunk.iter().all(|&x| x == 1),
                "{ctx}: chunk {c} (panicking span {lost:?})"
            );
        }
    }
}
