"""mkdocs hook: adds the reference pages generated from the code (mxbatch/cli/reference.py)
to the site at build time, so they cannot drift from the spec's dataclasses, the
backends' options and the CLI; the site's description names the registry's backends."""

from mkdocs.structure.files import File

from mxbatch.cli import reference


def on_config(config):
    config["site_description"] = reference.project_description()
    return config


def on_files(files, config):
    for path, text in reference.generated_pages().items():
        files.append(File.generated(config, path, content=text))
    return files
