"""Atomic read-modify-write instructions (lock-prefixed, and xchg with a memory operand)
executed per step, from a callgrind profile recorded with --dump-instr=yes, by function.
Usage (the eighth session's profiling command, plus --dump-instr=yes):
  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=OUT \
    --toggle-collect=sparse_gluon::train::step target/profiling/examples/sparse_gluon \
    --child c --variants c --data-dir D --data-file D/tutorial.libsvm --epochs 3 --threads 1 --json
  python3 scripts/count_atomics.py OUT [STEPS=400] [TOP=40]
Each such instruction costs ~3 ns on the project VM whatever the instruction count says."""
import re,subprocess,collections,sys
f = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
counts=collections.Counter(); fnat={}
ob=None; addr=0; skip=False; names={}; fns={}; fn=None
for l in open(f):
    l=l.rstrip('\n')
    m=re.match(r'(c?ob)=\((\d+)\)(?: (.*))?',l)
    if m:
        if m.group(3): names[m.group(2)]=m.group(3)
        if m.group(1)=='ob': ob=names[m.group(2)]
        continue
    m=re.match(r'(c?fn)=\((\d+)\)(?: (.*))?',l)
    if m:
        if m.group(3): fns[m.group(2)]=m.group(3)
        if m.group(1)=='fn': fn=fns[m.group(2)]
        continue
    if l.startswith('calls='): skip=True; continue
    if not l or l[0] not in '0123456789+-*': continue
    p=l.split(); a=p[0]
    if a.startswith('0x'): addr=int(a,16)
    elif a[0]=='+': addr+=int(a[1:])
    elif a[0]=='-': addr-=int(a[1:])
    if skip: skip=False; continue
    if len(p)>=3: counts[(ob,addr)]+=int(p[2]); fnat[(ob,addr)]=fn
locked=set()
for obj in set(o for o,_ in counts):
    out=subprocess.run(['objdump','-d','--no-show-raw-insn',obj],capture_output=True,text=True).stdout
    for ln in out.split('\n'):
        m=re.match(r'\s*([0-9a-f]+):\s+(.*)',ln)
        if m and (m.group(2).startswith('lock') or (m.group(2).startswith('xchg') and '(' in m.group(2))):
            locked.add((obj,int(m.group(1),16)))
by=collections.Counter()
for k in locked:
    if counts.get(k): by[fnat[k]]+=counts[k]
tot=sum(by.values()); print("total/step",tot/steps)
for k,c in by.most_common(top): print("%6.1f %s"%(c/steps,k[:140]))
