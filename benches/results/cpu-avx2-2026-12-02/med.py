import re,statistics,collections
d=collections.defaultdict(list)
cur=None
for l in open('benches/results/cpu-avx2-2026-12-02/'+__import__("sys").argv[1]+''):
    m=re.match(r'== rep (\d) (\S+) (\S+)',l)
    if m: cur=(m.group(2),m.group(3)); continue
    m=re.match(r'\s*(\d)\s+(\d\w \S+)\s+(\d*)\s+(\d+) \|\s+([\d.]+) \|\s+([\d.]+) \|',l)
    if m and cur:
        d[(cur[0],cur[1],int(m.group(1)),m.group(2))].append((float(m.group(5)),float(m.group(6)),int(m.group(4))))
for key in sorted(d):
    v=d[key]
    g=statistics.median(x[0] for x in v); p=statistics.median(x[1] for x in v)
    r=statistics.median(x[0]/max(x[1],1e-9) for x in v)
    print(f"{key[0]:8} {key[1]:5} thr{key[2]} {key[3]:9} n/bytes={v[0][2]:>10} GB/s={g:6.1f} probe={p:6.1f} ratio(med)={r:5.2f} runs={len(v)}")
