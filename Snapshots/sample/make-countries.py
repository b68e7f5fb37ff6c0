#!/usr/bin/env python3
"""Regenerates data/countries.ndjson from Debian's iso-codes package (ISO 3166-1).

Source: https://salsa.debian.org/iso-codes-team/iso-codes (Debian package `iso-codes`),
licence LGPL-2.1-or-later. One record per country; `id` is the alpha-2 code.
Usage: python3 Snapshots/sample/make-countries.py > Snapshots/sample/countries.ndjson
"""
import json

with open("/usr/share/iso-codes/json/iso_3166-1.json", encoding="utf-8") as f:
    countries = json.load(f)["3166-1"]

for c in sorted(countries, key=lambda c: c["alpha_2"]):
    record = {"id": c["alpha_2"], "alpha3": c["alpha_3"], "numeric": c["numeric"], "name": c["name"]}
    for key, target in (("official_name", "officialName"), ("common_name", "commonName"), ("flag", "flag")):
        if key in c:
            record[target] = c[key]
    print(json.dumps(record, ensure_ascii=False, sort_keys=True))
