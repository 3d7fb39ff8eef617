"""``jalapeno build-native``: the optional compiled build of the simulator's per-event modules."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("build-native")
    def build_native(
        clean: bool = typer.Option(False, "--clean", help="Remove every native build (pure Python from then on)."),
        status: bool = typer.Option(False, "--status", help="Say whether a build is used, and why not."),
    ) -> None:
        """Compile the simulator's per-event modules with mypyc (optional: same results, faster simulations).

        Needs mypy and a C compiler (pip install 'jalapeno[native]'); about a minute of one core. The build goes
        into $JALAPENO_CACHE/native (else ~/.cache/jalapeno/native), keyed by the sources it was made from: new
        processes of this tree use it while those sources are unchanged, pure Python otherwise (edit a source:
        build again). JALAPENO_NATIVE=0 turns it off for a process.
        """
        from jalapeno.native import build as nb

        if clean and status:
            raise nb.NativeBuildError("give --clean or --status, not both")
        if clean:
            nb.clean(log=typer.echo)
            return
        if status:
            _, lines = nb.status_lines()
            for line in lines:
                typer.echo(line)
            return
        nb.build(log=typer.echo)
