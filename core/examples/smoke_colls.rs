//! Quick check of every collective (run under fxrun -n N).
use ferrocx::*;
fn main() -> Result<()> {
    let comm = Communicator::from_env()?;
    let (r, n) = (comm.rank(), comm.nranks());
    for &count in &[0usize, 1, 7, 1000, 300_000, 3_000_000] {
        let send: Vec<f32> = (0..count).map(|i| (r * 3 + i % 7) as f32).collect();
        let mut recv = vec![0f32; count];
        let mut dt = std::time::Duration::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            comm.all_reduce(&send, &mut recv, RedOp::Sum)?;
            dt = dt.min(t.elapsed());
        }
        for i in 0..count {
            let want: f32 = (0..n).map(|q| (q * 3 + i % 7) as f32).sum();
            assert_eq!(recv[i], want, "all_reduce count {count} i {i}");
        }
        let mut ag = vec![0f32; count * n];
        comm.all_gather(&send, &mut ag)?;
        for q in 0..n {
            for i in 0..count {
                assert_eq!(ag[q * count + i], (q * 3 + i % 7) as f32);
            }
        }
        let mut b = if r == 1 % n { send.clone() } else { vec![0f32; count] };
        comm.broadcast_in_place(&mut b, 1 % n)?;
        for i in 0..count {
            assert_eq!(b[i], ((1 % n) * 3 + i % 7) as f32);
        }
        let mut red = vec![0f32; count];
        comm.reduce(&send, &mut red, RedOp::Max, 0)?;
        if r == 0 {
            for i in 0..count {
                assert_eq!(red[i], ((n - 1) * 3 + i % 7) as f32);
            }
        }
        if r == 0 {
            println!("count {count}: all_reduce {:?} ok", dt);
        }
    }
    comm.barrier()?;
    comm.destroy()
}
