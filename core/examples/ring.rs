//! The README's example: every rank sends 1 MiB to the next and receives from
//! the previous one. Run: `fxrun -n 4 --bind core -- target/release/examples/ring`
//! (build with `cargo build --release --example ring -p ferrocx`).

use ferrocx::Communicator;

fn main() -> ferrocx::Result<()> {
    // Rank, size and rendezvous come from fxrun, mpirun, srun or torchrun.
    let comm = Communicator::from_env()?;
    let (me, n) = (comm.rank(), comm.nranks());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);

    let out = vec![me as u8; 1 << 20];
    let mut inp = vec![0u8; 1 << 20];
    comm.register(&inp)?; // optional: large receives get a single copy either way

    // A group posts several operations at once: no deadlock whatever the order.
    let mut g = comm.group_start();
    g.send(&out, right)?;
    g.recv(&mut inp, left)?;
    g.group_end()?;

    assert!(inp.iter().all(|&b| b == left as u8));
    comm.destroy()
}
