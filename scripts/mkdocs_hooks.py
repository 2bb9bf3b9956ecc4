"""mkdocs hooks (mkdocs.yml `hooks:`; mkdocs 1.4 has no exclude_docs):

- on_files: docs/ also holds files that are not pages of the site (the Doxyfile, Doxygen's
  main page, the man page): they are not copied into it.
- on_post_build: site/api/ is the API reference Doxygen makes from the public headers
  (`doxygen docs/Doxyfile` -> build-docs/html/), not the placeholder docs/api/index.html (which
  exists so that links to api/index.html resolve while mkdocs checks them). build-docs/html/ is
  used as it is when it is newer than the headers and the Doxyfile (CI's API reference stage made
  it), else doxygen runs (about 5 s). Without doxygen the build warns, so `--strict` fails.
"""
import glob
import logging
import os
import shutil
import subprocess

log = logging.getLogger("mkdocs.hooks.redlock")
NOT_PAGES = {"Doxyfile", "mainpage.dox", "redlock-run.1"}


def on_files(files, config):
    for file in list(files):
        if file.src_path in NOT_PAGES:
            files.remove(file)
    return files


def _reference(root):
    html = os.path.join(root, "build-docs", "html")
    index = os.path.join(html, "index.html")
    inputs = glob.glob(os.path.join(root, "include", "redlock", "**", "*.hpp"), recursive=True)
    inputs += [os.path.join(root, "docs", "Doxyfile"), os.path.join(root, "docs", "mainpage.dox")]
    if os.path.exists(index) and os.path.getmtime(index) >= max(map(os.path.getmtime, inputs)):
        return html
    if shutil.which("doxygen") is None:
        log.warning("doxygen is not installed: site/api/ keeps the placeholder")
        return None
    done = subprocess.run(["doxygen", "docs/Doxyfile"], cwd=root, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(index):
        log.warning("doxygen docs/Doxyfile failed: %s", done.stderr[-2000:])
        return None
    return html


def on_post_build(config):
    root = os.path.dirname(os.path.abspath(config["config_file_path"]))
    html = _reference(root)
    if html:
        api = os.path.join(config["site_dir"], "api")
        shutil.rmtree(api, ignore_errors=True)
        shutil.copytree(html, api)
