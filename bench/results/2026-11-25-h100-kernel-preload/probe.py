import time, torch, ferrocx
t0 = time.time()
def say(*a): print(f"{time.time()-t0:7.3f}", *a, flush=True)
comm = ferrocx.Communicator.from_env(); me, n = comm.rank, comm.nranks
dev = torch.device("cuda", comm.device or 0)
s = torch.cuda.Stream(device=dev)
with torch.cuda.stream(s):
    for dt in [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]:
        x = (torch.arange(1 << 16, device=dev) % 97 + me).to(dt)
        y = comm.all_reduce(x); say("ar", dt)
        g = comm.all_gather(torch.full((1000,), me, dtype=dt, device=dev)); say("ag", dt)
        b = comm.broadcast(torch.full((333,), 7 if me == 0 else -1, dtype=dt, device=dev), root=0); say("bc", dt)
    s.synchronize(); say("synced")
comm.device_error()
x = torch.full((4096,), float(me + 1), device=dev)
comm.all_reduce(x, out=x); torch.cuda.current_stream(dev).synchronize(); say("inplace", x[0].item())
y = torch.empty(4096, device=dev)
if me == 0:
    comm.send(x * 2, 1); say("sent")
elif me == 1:
    comm.recv(y, 0); say("recv queued"); torch.cuda.current_stream(dev).synchronize(); say("recv", y[0].item())
torch.cuda.synchronize(); say("all synced")
comm.destroy(); say("done")
