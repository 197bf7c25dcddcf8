import collections,re,sys
samples=[];cur=[]
for line in open(sys.argv[1]):
    if not line.strip():
        if cur: samples.append(cur); cur=[]
        continue
    cur.append(line.rstrip())
if cur: samples.append(cur)
def sym(l):
    p=l.strip().split(None,1)
    return re.sub(r'\+0x[0-9a-f]+$','',p[1]) if len(p)>1 else '?'
step=[[sym(l) for l in s[1:]] for s in samples if any('train::step' in l for l in s[1:])]
thr=collections.Counter(s[0].split()[0] for s in samples)
print('samples',len(samples),'in step',len(step), thr.most_common(5))
leaf=collections.Counter(s[0][:100] for s in step)
for k,v in leaf.most_common(22): print(f"{100*v/len(step):5.1f}% {k}")
phase=collections.Counter()
order=[('trainer','Trainer::step'),('backward','backward_with'),('loss','SigmoidBinaryCrossEntropyLoss'),('forward','Sequential as')]
for s in step:
    fr=' | '.join(s)
    for name,k in order:
        if k in fr: phase[name]+=1; break
    else: phase['step other']+=1
print({k:round(100*v/len(step),1) for k,v in phase.items()})
# within backward: which op closure
bw=collections.Counter()
for s in step:
    fr=' | '.join(s)
    if 'backward_with' not in fr: continue
    m=None
    for f in s:
        if '{{closure}}' in f and ('sparrow' in f):
            m=f; 
        if 'backward_with' in f: break
    bw[(m or 'engine itself')[:110]]+=1
print('backward breakdown:')
for k,v in bw.most_common(10): print(f"   {100*v/len(step):5.1f}% {k}")
