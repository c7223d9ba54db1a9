/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plots through gnuplot (Debian gnuplot-nox): each figure's series go to
 * plain data files and one script draws them all, so a reader can restyle a
 * plot by editing the script and rerunning `gnuplot plots.gp` in the
 * directory. gnuplot runs as a child process with its stdout sent to our
 * stderr (stdout may be carrying --json). Missing gnuplot is not an error:
 * the data and the script are still written, with a warning.
 */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "analyze.h"

extern char **environ;

#define PATH_BYTES 4096

/* A gnuplot single-quoted string: '' stands for a quote; newlines dropped. */
static void put_quoted(FILE *f, const char *text)
{
    fputc('\'', f);
    for (const char *c = text; *c; c++) {
        if (*c == '\'')
            fputs("''", f);
        else if (*c != '\n' && *c != '\r')
            fputc(*c, f);
    }
    fputc('\'', f);
}

static int path_join(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, PATH_BYTES, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_BYTES) {
        fprintf(stderr, "cpr-analyze: --plot-dir: path too long: %s/%s\n", dir, name);
        return -1;
    }
    return 0;
}

static int write_series(const char *dir, const char *fig, size_t k, const plot_series *s)
{
    char name[256], path[PATH_BYTES];
    snprintf(name, sizeof name, "%s_%zu.dat", fig, k);
    if (path_join(path, dir, name))
        return -1;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cpr-analyze: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# %s: x y%s\n", s->title, s->lo ? " lo hi" : "");
    for (size_t i = 0; i < s->n; i++) {
        fprintf(f, "%.17g %.17g", s->x[i], s->y[i]);
        if (s->lo)
            fprintf(f, " %.17g %.17g", s->lo[i], s->hi[i]);
        fputc('\n', f);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "cpr-analyze: error writing %s\n", path);
    return bad ? -1 : 0;
}

static int has_points(const plot_figure *fig)
{
    for (size_t k = 0; k < fig->n_series; k++)
        if (fig->series[k].n > 0)
            return 1;
    return 0;
}

/* The script lines of one figure; series without points are left out, and
 * a figure without any is not drawn (gnuplot cannot scale an empty plot). */
static void script_figure(FILE *f, const plot_figure *fig, int svg)
{
    if (!has_points(fig)) {
        fprintf(f, "# %s: no points to draw\n", fig->name);
        return;
    }
    fprintf(f, "set output '%s.%s'\n", fig->name, svg ? "svg" : "png");
    fputs("set xlabel ", f);
    put_quoted(f, fig->xlabel);
    fputs("\nset ylabel ", f);
    put_quoted(f, fig->ylabel);
    fprintf(f, "\n%s\n", fig->logx ? "set logscale x" : "unset logscale x");
    const char *sep = "plot ";
    for (size_t k = 0; k < fig->n_series; k++) {
        const plot_series *s = &fig->series[k];
        if (s->n == 0)
            continue;
        fprintf(f, "%s'%s_%zu.dat' using %s with %s title ", sep, fig->name, k,
                s->lo ? "1:2:3:4" : "1:2", s->lo ? "yerrorlines" : "linespoints");
        put_quoted(f, s->title);
        sep = ", \\\n     ";
    }
    fputc('\n', f);
}

static int write_script(const char *dir, const char *script, int svg,
                        const plot_figure *figs, size_t n)
{
    char abs_dir[PATH_MAX];
    if (!realpath(dir, abs_dir)) {
        fprintf(stderr, "cpr-analyze: --plot-dir: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    FILE *f = fopen(script, "w");
    if (!f) {
        fprintf(stderr, "cpr-analyze: cannot write %s: %s\n", script, strerror(errno));
        return -1;
    }
    fputs("# Written by cpr-analyze; redraw with: gnuplot plots.gp\n", f);
    fputs("cd ", f);
    put_quoted(f, abs_dir);
    fprintf(f, "\nset terminal %s size 960,640 noenhanced\n", svg ? "svg" : "pngcairo");
    fputs("set key outside right\nset grid\n", f);
    /* keep points off the frame: single-point series sit at the autoscale ends */
    fputs("set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05\n", f);
    for (size_t i = 0; i < n; i++)
        script_figure(f, &figs[i], svg);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "cpr-analyze: error writing %s\n", script);
    return bad ? -1 : 0;
}

/* Run gnuplot on the script: 0 drawn or gnuplot missing (warned), -1 failed. */
static int run_gnuplot(const char *script)
{
    posix_spawn_file_actions_t fa;
    pid_t pid;
    char *argv[] = {"gnuplot", (char *)script, NULL};
    if (posix_spawn_file_actions_init(&fa))
        return -1;
    posix_spawn_file_actions_adddup2(&fa, 2, 1); /* keep our stdout for --json */
    int err = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err == ENOENT) {
        fprintf(stderr, "cpr-analyze: warning: gnuplot not found: plots skipped (install "
                "gnuplot-nox, then run gnuplot %s)\n", script);
        return 0;
    }
    if (err) {
        fprintf(stderr, "cpr-analyze: cannot run gnuplot: %s\n", strerror(err));
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cpr-analyze: gnuplot failed on %s\n", script);
        return -1;
    }
    return 0;
}

int plot_write(const char *dir, int svg, const plot_figure *figs, size_t n)
{
    char script[PATH_BYTES];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cpr-analyze: --plot-dir: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < figs[i].n_series; k++)
            if (write_series(dir, figs[i].name, k, &figs[i].series[k]))
                return -1;
    if (path_join(script, dir, "plots.gp") || write_script(dir, script, svg, figs, n))
        return -1;
    return run_gnuplot(script);
}
