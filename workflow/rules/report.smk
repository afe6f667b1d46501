# Stage 5: the dated report. Dates, hostnames and versions enter here and nowhere upstream.
#
# A second run on the same date keeps the first: the outputs are flagged update(), so
# Snakemake does not delete them before the job, and the script moves the earlier
# report/<date>/ and report/<date>.zip aside to report/<date>.<n>/ and report/<date>.<n>.zip
# (n = 1, 2, ...) before putting the new one in place. With nothing changed, the outputs are
# newer than every input and `snakemake -n` has nothing to do. docs/report.md has the rest.


rule report:
    input:
        report_input_files,
    output:
        html=update(
            report(
                "report/{date}/index.html",
                caption="../report/dated_report.rst",
                category="Dated report",
            )
        ),
        md=update("report/{date}/report.md"),
        manifest=update("report/{date}/manifest.json"),
        claims=update(
            report(
                "report/{date}/claims.csv",
                caption="../report/claims.rst",
                category="Dated report",
            )
        ),
        archive=update("report/{date}.zip"),
    log:
        "logs/report/{date}.log",
    benchmark:
        "benchmarks/report/{date}.tsv"
    localrule: True
    conda:
        "../envs/bytesup.yaml"
    resources:
        mem_mb=1000,  # reads CSV and JSON files: 70 MB on the tiny model, nothing grows with the model
        runtime=10,
    params:
        sources=report_sources,
        refused=lessons_refused,
        jobs=report_jobs,
        model=MODEL,
    script:
        "../scripts/report.py"
