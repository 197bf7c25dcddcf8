import numpy as np, time
n=16<<20
a=np.random.default_rng(0).uniform(-1,1,n).astype(np.float32); b=a.copy()
for _ in range(3): c=a+b
t=time.perf_counter(); 
for _ in range(100): c=a+b
print("numpy add ms", (time.perf_counter()-t)*10)
