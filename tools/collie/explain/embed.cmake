# Turns a text file into a C++ raw string literal (cmake -DIN=... -DOUT=...
# -P embed.cmake): the explain page ships inside the collie binary.
file(READ "${IN}" content)
file(WRITE "${OUT}.tmp" "R\"collie_embed(${content})collie_embed\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
