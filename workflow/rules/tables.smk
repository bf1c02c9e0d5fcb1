# The papers' tables, curves and contact sheets, from every run's own files; the files `snakemake --report`
# shows, each with a caption (workflow/report/*.rst).

REPORTS = {
    "text_table.html": {"caption": "../report/text_table.rst", "category": "1. Tables"},
    "image_table.html": {"caption": "../report/image_table.rst", "category": "1. Tables"},
    **{
        f"{prefix}{key}_curves.png": {
            "caption": f"../report/{key}_curves.rst",
            "category": "2. Curves",
            "subcategory": "text-to-image" if prefix else "text",
        }
        for prefix in ("", "image_")
        for key in ("reward", "kl", "loss", "clip_ratio")
    },
    "credit_by_reveal_step.png": {"caption": "../report/credit.rst", "category": "3. Credit"},
    "contact_sheets": {
        "caption": "../report/contact_sheet.rst",
        "category": "4. Contact sheets",
        "patterns": ["{model}.png"],
    },
}


rule tables:
    """Held-out accuracy and reward per method (text), GenEval per tag (images), curves, credit, contact sheets."""
    input: inputs("tables")
    output: outputs("tables", REPORTS)
    params: **params("tables")
    log: log_of("tables")
    benchmark: benchmark_of("tables")
    conda: CONDA
    shell: SHELL
