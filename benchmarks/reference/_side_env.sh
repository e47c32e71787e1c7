# Sourced by the scripts that build the reference side environments (make_env_selectors.sh,
# make_env_fedau.sh, fedcor_hicsfl_env.sh): the two steps they share. Messages name the calling script.
# It needs PYTHON (the side environments' interpreter) set by the caller.

# extract NAME MIRROR COMMIT DEST FILES: the files of COMMIT from the git directory MIRROR into DEST, each
# checked against its blob id (FILES: lines "PATH BLOB"; a path may hold spaces, the blob is the last field).
extract() {
    local name=$1 mirror=$2 commit=$3 dest=$4 files=$5 script
    script=$(basename "$0")
    if ! git --git-dir="$mirror" cat-file -e "$commit^{commit}" 2>/dev/null; then
        if git --git-dir="$mirror/.git" cat-file -e "$commit^{commit}" 2>/dev/null; then
            mirror="$mirror/.git"
        else
            echo "$script: no git directory holding $name commit $commit at $mirror" >&2
            echo "  (a session: its fetch tool; elsewhere: git clone the repository and set ${name^^}_MIRROR)" >&2
            exit 1
        fi
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    while read -r line; do
        [ -n "$line" ] || continue
        local path="${line% *}" blob="${line##* }"
        mkdir -p "$dest/$(dirname "$path")"
        git --git-dir="$mirror" show "$commit:$path" >"$dest/$path"
        got=$(git hash-object "$dest/$path")
        if [ "$got" != "$blob" ]; then
            echo "$script: $path is not the file of $name commit $commit ($got, expected $blob)" >&2
            exit 1
        fi
    done <<<"$files"
    printf '%s sources: git commit %s, from %s\n' "$name" "$commit" "$mirror" >"$dest/SOURCE.txt"
}

# venv DIR PACKAGE...: the virtual environment DIR (made with $PYTHON if absent) with the packages installed.
venv() {
    local dir=$1
    shift
    if [ ! -x "$dir/bin/python" ]; then
        "$PYTHON" -m venv "$dir"
    fi
    "$dir/bin/python" -m pip install --quiet "$@"
}
