"""kernel_times.py CSV... — the kernels of one step (the last whole one: a step
starts at its embedding launch) in each ncu --csv log of kernel_times.sh,
summed by kernel name: count, time, DRAM bytes read, GB/s. LIST=1 also
lists every launch of the step with its grid."""
import csv, sys, re, collections
for path in sys.argv[1:]:
    rows = collections.OrderedDict()
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        k = r["ID"]
        d = rows.setdefault(k, {"name": r["Kernel Name"], "grid": r["Grid Size"], "block": r["Block Size"]})
        v = r["Metric Value"].replace(",", "")
        try: v = float(v)
        except: continue
        u = r["Metric Unit"]
        if r["Metric Name"].startswith("gpu__time_duration"):
            d["us"] = v / 1000 if u in ("ns", "nsecond") else v * 1000 if u in ("ms", "msecond") else v
        elif r["Metric Name"].startswith("dram__bytes_read"):
            mult = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(u, 1)
            d["MB"] = v * mult / 1e6
    ks = list(rows.values())
    starts = [i for i, d in enumerate(ks) if "embed" in d["name"].lower()]
    if len(starts) >= 2: seg = ks[starts[-2]:starts[-1]]
    elif starts: seg = ks[starts[-1]:]
    else: seg = ks
    fam = collections.OrderedDict()
    tot = 0; totmb = 0
    for d in seg:
        n = re.split(r"[<(]", d["name"])[0].replace("void ", "").strip()
        key = n
        e = fam.setdefault(key, [0, 0.0, 0.0])
        e[0] += 1; e[1] += d.get("us", 0); e[2] += d.get("MB", 0)
        tot += d.get("us", 0); totmb += d.get("MB", 0)
    print(f"== {path}: {len(seg)} kernels, {tot:.1f} us, {totmb:.0f} MB read ({totmb/1e3/(tot/1e6+1e-12):.0f} GB/s)")
    for k, (c, us, mb) in sorted(fam.items(), key=lambda x: -x[1][1]):
        print(f"  {k[:60]:60s} n={c:4d} {us:9.1f} us  {mb:8.1f} MB  {mb/1e3/(us/1e6+1e-12):6.0f} GB/s")

    if len(sys.argv) > 0 and __import__("os").environ.get("LIST"):
        for d in seg: print(f"    {re.split(r'[(]', d['name'])[0][:70]:70s} {d['grid']:>14s} {d.get('us',0):8.1f} us {d.get('MB',0):7.1f} MB")
